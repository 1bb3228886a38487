package servicekit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"

	callsv1 "switchyard.dev/gen/switchyard/calls/v1"
)

// maxMsgSize bounds one gRPC message either way. KV snapshots and index dumps are the
// big ones; 64 MiB leaves room without letting one bad peer exhaust memory.
const maxMsgSize = 64 << 20

// Server is one service's gRPC server plus its HTTP port. Build it with New, register
// services on it (RegisterService) and gateways with Gateway, then Serve.
type Server struct {
	opts    Options
	log     *slog.Logger
	reg     *prometheus.Registry
	grpc    *grpc.Server
	health  *health.Server
	gateway *runtime.ServeMux
	httpMux *http.ServeMux
	httpSrv *http.Server
	// debugGuard is who may read /debug/pprof/ on a public port (debug.go),
	// set by the service after New, while the port may already serve.
	debugGuard atomic.Pointer[func(*http.Request) bool]
	done       chan struct{} // closed once shutdown has stopped accepting (Done)

	// Mutual TLS (nil when off): the configurations every listener and
	// Dial use, and the authorization of calls by identity.
	tls   *tlsConfigs
	authz *authorizer
	// healthGRPC serves grpc.health.v1 alone on Options.HealthAddr.
	healthGRPC *grpc.Server
	// calls serves the unary methods registered with RegisterService over
	// call streams (calls.go).
	calls *callServer

	// What is in flight, counted outermost (see interceptors.go): what the drain
	// waits for and what a cut reports.
	httpCalls, grpcCalls inflight

	mu         sync.Mutex
	grpcLis    *notifyListener
	httpLis    *notifyListener
	healthLis  net.Listener
	loopback   *grpc.ClientConn // gateway → this server, created in Listen
	gateways   []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error
	gatewayErr error
	drainHooks []func(context.Context) // OnDrain
	closeHooks []func(context.Context) // OnShutdown
	served     bool
	closed     bool
}

// New builds the server: the trace stats handler (traceGRPC), then the in-flight count, request
// metrics, logging and panic recovery interceptors (see interceptors.go for why in that
// order), the grpc.health.v1 service (NOT_SERVING until Serve) and server reflection.
// Nothing listens until Listen or Serve. An empty GRPCAddr means "127.0.0.1:0".
func New(opts Options) (*Server, error) {
	opts = opts.withDefaults()
	if opts.Name == "" {
		return nil, errors.New("servicekit: Options.Name is required")
	}
	if opts.GRPCAddr == "" {
		opts.GRPCAddr = "127.0.0.1:0"
	}
	if err := opts.checkPublicTLS(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: opts.LogLevel})).With("service", opts.Name)
	}

	s := &Server{
		opts:   opts,
		log:    log,
		reg:    prometheus.NewRegistry(),
		health: health.NewServer(),
		done:   make(chan struct{}),
	}
	s.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m := newRPCMetrics(s.reg, s.MetricName(""))

	unary := []grpc.UnaryServerInterceptor{s.grpcCalls.unary, m.unary}
	stream := []grpc.StreamServerInterceptor{s.grpcCalls.stream, m.stream}
	grpcOpts := []grpc.ServerOption{
		grpc.StatsHandler(newServerTraceGRPC()),
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
		grpc.KeepaliveEnforcementPolicy(serverKeepalive),
		experimental.BufferPool(wirePool), // codec.go
	}
	var healthOpts []grpc.ServerOption
	if opts.MaxConcurrentStreams > 0 {
		grpcOpts = append(grpcOpts, grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams))
		healthOpts = append(healthOpts, grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams))
	}
	grpcOpts = append(grpcOpts, transportServerOptions()...)
	if opts.TLS.Enabled() {
		if err := s.setupTLS(); err != nil {
			return nil, err
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(s.tls.server(false, "h2"))))
		// Counted, then refused before the logging interceptor: a refusal
		// is logged once, by the authorizer, with the caller's identity.
		unary = append(unary, s.authz.unary)
		stream = append(stream, s.authz.stream)
	}
	unary = append(unary, logUnary(log), recoverUnary(log))
	stream = append(stream, logStream(log, s.done), recoverStream(log))
	grpcOpts = append(grpcOpts, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	s.grpc = grpc.NewServer(grpcOpts...)
	s.calls = newCallServer(log, unary, s.done)
	callsv1.RegisterCallServiceServer(s.grpc, s.calls)
	// The empty name is the whole server; it turns SERVING in Serve, once the
	// service registrations are known.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s, &healthService{Server: s.health, done: s.done}) // its Check over call streams too
	reflection.Register(s.grpc)
	if opts.HealthAddr != "" {
		s.healthGRPC = grpc.NewServer(healthOpts...)
		healthpb.RegisterHealthServer(s.healthGRPC, &healthService{Server: s.health, done: s.done})
	}

	s.gateway = runtime.NewServeMux(
		runtime.WithIncomingHeaderMatcher(gatewayHeaders),
		runtime.WithMetadata(s.restPeer),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
			Marshaler: &runtime.JSONPb{
				MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: false},
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
			},
		}),
	)
	s.httpMux = http.NewServeMux()
	s.httpMux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	s.httpMux.HandleFunc("GET /healthz", s.serveHealthz)
	if opts.Pprof {
		s.servePprof()
	}
	s.httpMux.Handle("/", s.guardREST(s.gateway))
	s.httpSrv = &http.Server{
		Handler:           s.httpHandler(m),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// RegisterService registers a service implementation, before Serve: its
// methods are served as gRPC calls and its unary methods also over call
// streams (calls.go, CallConn). A Server is a grpc.ServiceRegistrar, so the
// generated Register functions take it.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	s.grpc.RegisterService(desc, impl)
	s.calls.add(desc, impl)
}

// Registry is this server's own Prometheus registry; /metrics serves it. Name metrics
// with MetricName.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Logger is the server's logger (attribute service=Name when servicekit built it).
func (s *Server) Logger() *slog.Logger { return s.log }

// Health is the grpc.health.v1 server, to flip serving status. Serve sets the whole
// server ("") and every registered service SERVING when it starts, and everything
// NOT_SERVING when shutdown begins (after which updates are ignored). /healthz answers
// from it too.
func (s *Server) Health() *health.Server { return s.health }

// Name is Options.Name.
func (s *Server) Name() string { return s.opts.Name }

// MetricName returns "switchyard_<service>_<what>" with the service name's dashes as
// underscores, the naming rule for every Switchyard metric.
func (s *Server) MetricName(what string) string {
	n := "switchyard_" + strings.ReplaceAll(s.opts.Name, "-", "_")
	if what != "" {
		n += "_" + what
	}
	return n
}

// Done is closed once shutdown has turned health NOT_SERVING and stopped accepting
// (see shutdown.go), as the drain begins. Long-lived handlers that would never end on
// their own (watches, subscriptions), gRPC or HTTP, select on it and return, so that
// the drain does not wait for them until its deadline; calls that end by themselves
// (a generation stream, an SSE response) ignore it and are let finish.
func (s *Server) Done() <-chan struct{} { return s.done }

// Gateway registers a grpc-gateway handler, called with a client connection to this same
// server so that REST calls go through the same interceptors, e.g.
//
//	srv.Gateway(schedulerv1.RegisterSchedulerServiceHandler)
//
// Handlers registered before Listen are wired in Listen (when the gRPC address is
// known); later ones at once. A registration error is logged and returned by Serve.
func (s *Server) Gateway(register func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error) {
	s.mu.Lock()
	conn := s.loopback
	if conn == nil {
		s.gateways = append(s.gateways, register)
	}
	s.mu.Unlock()
	if conn != nil {
		s.registerGateway(register, conn)
	}
}

func (s *Server) registerGateway(register func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error, conn *grpc.ClientConn) {
	// The context only scopes the registration itself; the handlers use each request's.
	if err := register(context.Background(), s.gateway, conn); err != nil {
		s.log.Error("gateway registration failed", "err", err)
		s.mu.Lock()
		s.gatewayErr = errors.Join(s.gatewayErr, err)
		s.mu.Unlock()
	}
}

// GatewayHandler is the REST gateway, its bodies bounded and its callers
// identified as on "/" (guardREST), for a service that routes a path prefix
// (under one of its own) back to it.
func (s *Server) GatewayHandler() http.Handler { return s.guardREST(s.gateway) }

// HandleHTTP adds an HTTP route (net/http ServeMux pattern, e.g.
// "POST /v1/chat/completions"). Routes not matched by any pattern go to the gateway.
// Handlers are traced (W3C traceparent honoured), counted and panic-safe.
func (s *Server) HandleHTTP(pattern string, h http.Handler) { s.httpMux.Handle(pattern, h) }

// OnDrain adds a hook run when the drain begins, right after Done is closed: health is
// NOT_SERVING, nothing new is accepted, and in-flight calls are still running. It is
// for ending what would otherwise hold the drain until its deadline (watch streams,
// calls parked waiting for work that will not come); it must not close anything an
// in-flight call still uses. Hooks run in reverse order of registration, like defers,
// and should return at once; ctx expires at the drain deadline.
func (s *Server) OnDrain(f func(ctx context.Context)) {
	s.mu.Lock()
	s.drainHooks = append(s.drainHooks, f)
	s.mu.Unlock()
}

// OnShutdown adds a hook run after the drain, once every in-flight HTTP request and
// gRPC call has finished or been cut at the deadline: close the clients those calls
// used (connections to peers), flush what they left. Hooks run in reverse order of
// registration, like defers, with a context that expires ShutdownTimeout after
// shutdown began, or closeGrace after the hooks began if that is later.
func (s *Server) OnShutdown(f func(ctx context.Context)) {
	s.mu.Lock()
	s.closeHooks = append(s.closeHooks, f)
	s.mu.Unlock()
}

// Listen binds the gRPC listener and, if HTTPAddr is set, the HTTP one, so that
// GRPCAddr and HTTPAddr are known before Serve; it also opens the gateway's loopback
// connection. Calling it again does nothing.
func (s *Server) Listen() error {
	s.mu.Lock()
	if s.grpcLis != nil {
		s.mu.Unlock()
		return nil
	}
	if s.closed {
		s.mu.Unlock()
		return errors.New("servicekit: Listen on a closed server")
	}
	if err := s.checkExposure(); err != nil {
		s.mu.Unlock()
		return err
	}
	glis, err := net.Listen("tcp", s.opts.GRPCAddr)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("servicekit: %s: listen gRPC on %q: %w", s.opts.Name, s.opts.GRPCAddr, err)
	}
	var hlis net.Listener
	if s.opts.HTTPAddr != "" {
		hlis, err = net.Listen("tcp", s.opts.HTTPAddr)
		if err != nil {
			glis.Close()
			s.mu.Unlock()
			return fmt.Errorf("servicekit: %s: listen HTTP on %q: %w", s.opts.Name, s.opts.HTTPAddr, err)
		}
	}
	var healthLis net.Listener
	if s.healthGRPC != nil {
		if healthLis, err = net.Listen("tcp", s.opts.HealthAddr); err != nil {
			glis.Close()
			if hlis != nil {
				hlis.Close()
			}
			s.mu.Unlock()
			return fmt.Errorf("servicekit: %s: listen health on %q: %w", s.opts.Name, s.opts.HealthAddr, err)
		}
	}
	conn, err := s.Dial(dialable(glis.Addr()))
	if err != nil {
		glis.Close()
		if hlis != nil {
			hlis.Close()
		}
		if healthLis != nil {
			healthLis.Close()
		}
		s.mu.Unlock()
		return fmt.Errorf("servicekit: %s: gateway loopback connection: %w", s.opts.Name, err)
	}
	s.grpcLis, s.loopback, s.healthLis = newNotifyListener(glis), conn, healthLis
	if hlis != nil {
		if cfg := s.httpTLS(); cfg != nil {
			hlis = tls.NewListener(hlis, cfg)
		}
		s.httpLis = newNotifyListener(hlis)
	}
	pending := s.gateways
	s.gateways = nil
	s.mu.Unlock()

	for _, register := range pending {
		s.registerGateway(register, conn)
	}
	return nil
}

// GRPCAddr is the bound gRPC address (e.g. "127.0.0.1:41235" or "[::]:9100"); "" before
// Listen.
func (s *Server) GRPCAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpcLis == nil {
		return ""
	}
	return s.grpcLis.Addr().String()
}

// HTTPAddr is the bound HTTP address; "" before Listen or when HTTP is disabled.
func (s *Server) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Serve listens if needed, marks the server and every registered service SERVING, and
// serves until ctx is done or a listener fails; then it shuts down in order (health
// NOT_SERVING, stop accepting, drain, close: see shutdown.go) and returns. It returns
// nil after a clean shutdown on ctx cancellation. Register everything (RegisterService, Gateway) before
// calling it.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.served {
		s.mu.Unlock()
		return errors.New("servicekit: Serve called twice")
	}
	s.served = true
	glis, hlis := s.grpcLis, s.httpLis
	s.mu.Unlock()

	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	errc := make(chan error, 3)
	running := 1
	if s.healthLis != nil {
		running++
		go func() { errc <- s.healthGRPC.Serve(s.healthLis) }()
	}
	go func() {
		err := s.grpc.Serve(glis)
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil // shutdown won the race with Serve (ctx was already done)
		}
		errc <- err
	}()
	if hlis != nil {
		running++
		go func() {
			err := s.httpSrv.Serve(hlis)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
	}
	s.log.Info("serving", "grpc_addr", glis.Addr().String(), "http_addr", s.HTTPAddr())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		running--
		if serveErr != nil {
			serveErr = fmt.Errorf("servicekit: %s: %w", s.opts.Name, serveErr)
			s.log.Error("server failed, shutting down", "err", serveErr)
		}
	}
	s.shutdown(glis, hlis)
	for ; running > 0; running-- {
		if err := <-errc; err != nil && serveErr == nil {
			serveErr = fmt.Errorf("servicekit: %s: %w", s.opts.Name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(serveErr, s.gatewayErr)
}

// dialable turns a listener address into one a client on this host can dial: a
// wildcard host ("[::]:9100", "0.0.0.0:9100") becomes loopback.
func dialable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
	}
	return tcp.String()
}

// Close releases what Listen acquired (listeners, loopback connection) for a server that
// will never Serve, e.g. because a sibling service failed to start. It does nothing to a
// server that is or was serving: Serve cleans up after itself.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.served {
		return nil
	}
	s.served = true // a later Serve fails instead of serving closed listeners
	s.closed = true
	var errs []error
	if s.grpcLis != nil {
		errs = append(errs, s.grpcLis.Close(), s.loopback.Close())
	}
	if s.httpLis != nil {
		errs = append(errs, s.httpLis.Close())
	}
	if s.healthLis != nil {
		errs = append(errs, s.healthLis.Close())
	}
	s.grpc.Stop()
	return errors.Join(errs...)
}
