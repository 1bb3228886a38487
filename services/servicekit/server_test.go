package servicekit

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

func TestMain(m *testing.M) {
	// otelhttp/otelgrpc read the global propagator; tests of trace propagation need the
	// W3C one that SetupTelemetry installs in real processes.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	goleak.VerifyTestMain(m)
}

// echoService is a test-only gRPC service written against a hand-made ServiceDesc, so
// that servicekit's tests need no generated code. Echo returns its input and records
// the span context it saw; Boom panics; Block waits for release; Panics streams then panics.
type echoService struct {
	mu        sync.Mutex
	spans     []trace.SpanContext // per Echo: what its context carried
	viaCalls  []bool              // per Echo: whether it came over a call stream
	values    []string            // per Echo: its input, in the order the calls ran
	deadline  time.Time           // the latest Block's, zero when it had none
	blockedIn chan struct{}       // receives when Block has started
	release   chan struct{}       // closing it lets Block return
}

const echoServiceName = "switchyard.test.Echo"

func (e *echoService) echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	e.mu.Lock()
	e.spans = append(e.spans, trace.SpanContextFromContext(ctx))
	_, via := grpc.ServerTransportStreamFromContext(ctx).(callTransport)
	e.viaCalls = append(e.viaCalls, via)
	e.values = append(e.values, in.GetValue())
	e.mu.Unlock()
	if in.GetValue() == "fail" {
		return nil, status.Error(codes.FailedPrecondition, "asked to fail")
	}
	return wrapperspb.String("echo: " + in.GetValue()), nil
}

func (e *echoService) block(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	e.mu.Lock()
	e.deadline, _ = ctx.Deadline()
	e.mu.Unlock()
	e.blockedIn <- struct{}{}
	select {
	case <-e.release:
		return wrapperspb.String("released"), nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func unaryMethod(name string, f func(*echoService, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return f(srv.(*echoService), ctx, req.(*wrapperspb.StringValue))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + echoServiceName + "/" + name}, h)
		},
	}
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: echoServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		unaryMethod("Echo", (*echoService).echo),
		unaryMethod("Block", (*echoService).block),
		// SlowEcho is Echo a few milliseconds late: what runs concurrently
		// with it is overtaken.
		unaryMethod("SlowEcho", func(e *echoService, ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			time.Sleep(2 * time.Millisecond)
			return e.echo(ctx, in)
		}),
		unaryMethod("Boom", func(*echoService, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			panic("boom")
		}),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Panics",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			if err := stream.SendMsg(wrapperspb.String("first")); err != nil {
				return err
			}
			panic("stream boom")
		},
	}},
}

// echoGateway is what a generated RegisterXxxHandler does, by hand: one REST route that
// calls Echo over the connection servicekit hands it.
func echoGateway(_ context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	// POST /v1/echo answers with how many bytes of body it read.
	if err := mux.HandlePath("POST", "/v1/echo", func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	}); err != nil {
		return err
	}
	return mux.HandlePath("GET", "/v1/echo/{value}", func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		_, outbound := runtime.MarshalerForRequest(mux, r)
		out := new(wrapperspb.StringValue)
		method := "/" + echoServiceName + "/Echo"
		if params["value"] == "boom" {
			method = "/" + echoServiceName + "/Boom"
		}
		if err := conn.Invoke(r.Context(), method, wrapperspb.String(params["value"]), out); err != nil {
			runtime.HTTPError(r.Context(), mux, outbound, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(r.Context(), mux, outbound, w, r, out)
	})
}

type running struct {
	srv    *Server
	svc    *echoService
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve has returned
	err    error         // what Serve returned, once done is closed
}

// stop cancels Serve and returns what it returned; it may be called more than once.
func (r *running) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start serves an echo server on loopback ports until the test ends.
func start(t testing.TB, opts Options) *running {
	t.Helper()
	return startWith(t, opts, nil)
}

// startWith is start with more registered on the server before it serves.
func startWith(t testing.TB, opts Options, register func(*Server)) *running {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "test-svc"
	}
	if opts.GRPCAddr == "" {
		opts.GRPCAddr = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	svc := &echoService{blockedIn: make(chan struct{}, 1), release: make(chan struct{})}
	srv.RegisterService(&echoDesc, svc)
	srv.Gateway(echoGateway)
	if register != nil {
		register(srv)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	conn, err := Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, svc: svc, conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = srv.Serve(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.stop()
		conn.Close()
	})
	waitServing(t, srv.GRPCAddr())
	return r
}

// waitServing polls the health service until SERVING: Serve flips it asynchronously.
func waitServing(t testing.TB, addr string) {
	t.Helper()
	eventually(t, "SERVING at "+addr, func() bool { return Healthcheck(addr) == nil })
}

// serving is waitServing for a loop of Run, which may not fail the test
// itself: it returns the last health check's error after the deadline.
func serving(addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := Healthcheck(addr)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHealthServingAfterServe(t *testing.T) {
	r := start(t, Options{})
	client := healthpb.NewHealthClient(r.conn)
	for _, tc := range []struct {
		service string
		want    healthpb.HealthCheckResponse_ServingStatus
		code    codes.Code
	}{
		{service: "", want: healthpb.HealthCheckResponse_SERVING},
		{service: echoServiceName, want: healthpb.HealthCheckResponse_SERVING},
		{service: "grpc.reflection.v1.ServerReflection", want: healthpb.HealthCheckResponse_SERVING},
		{service: "no.such.Service", code: codes.NotFound},
	} {
		resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: tc.service})
		if status.Code(err) != tc.code {
			t.Errorf("Check(%q): code %v, want %v", tc.service, status.Code(err), tc.code)
			continue
		}
		if err == nil && resp.GetStatus() != tc.want {
			t.Errorf("Check(%q) = %v, want %v", tc.service, resp.GetStatus(), tc.want)
		}
	}
}

func TestHealthNotServingBeforeServe(t *testing.T) {
	srv, err := New(Options{Name: "x", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := srv.Health().Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before Serve: %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
}

func TestHealthcheckReportsNotServing(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	r.srv.Health().SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := Healthcheck(r.srv.GRPCAddr()); err == nil {
		t.Error("Healthcheck of a NOT_SERVING server succeeded")
	}
	if code := get(t, "http://"+r.srv.HTTPAddr()+"/healthz", nil).StatusCode; code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while NOT_SERVING = %d, want 503", code)
	}
	if err := Healthcheck("127.0.0.1:1"); err == nil {
		t.Error("Healthcheck of a closed port succeeded")
	}
}

func TestReflectionListsServices(t *testing.T) {
	r := start(t, Options{})
	stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	for _, want := range []string{echoServiceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !got[want] {
			t.Errorf("reflection does not list %s; got %v", want, got)
		}
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	r := start(t, Options{})
	err := r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Boom", wrapperspb.String("x"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.Internal {
		t.Errorf("unary panic: code %v, want Internal", status.Code(err))
	}
	if strings.Contains(status.Convert(err).Message(), "boom") {
		t.Errorf("panic value leaked to the client: %q", status.Convert(err).Message())
	}

	stream, err := r.conn.NewStream(context.Background(), &echoDesc.Streams[0], "/"+echoServiceName+"/Panics")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var msg wrapperspb.StringValue
	if err := stream.RecvMsg(&msg); err != nil || msg.GetValue() != "first" {
		t.Fatalf("first stream message: %q, %v", msg.GetValue(), err)
	}
	if err := stream.RecvMsg(&msg); status.Code(err) != codes.Internal {
		t.Errorf("stream panic: code %v, want Internal", status.Code(err))
	}

	// The server survives and keeps answering.
	if err := r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Echo", wrapperspb.String("still here"), &msg); err != nil {
		t.Errorf("call after panics: %v", err)
	}
}

func TestPanicLogsStackOnce(t *testing.T) {
	var buf syncBuffer
	r := start(t, Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	_ = r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Boom", wrapperspb.String("x"), new(wrapperspb.StringValue))
	_ = r.stop()
	logs := buf.String()
	if n := strings.Count(logs, `"stack"`); n != 1 {
		t.Errorf("stack logged %d times, want 1:\n%s", n, logs)
	}
	if n := strings.Count(logs, `"grpc.code":"Internal"`); n != 1 {
		t.Errorf("finished call with Internal logged %d times, want 1:\n%s", n, logs)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(t *testing.T, url string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGatewayReachesGRPCThroughInterceptors(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	base := "http://" + r.srv.HTTPAddr()

	// W3C trace context from the HTTP client reaches the gRPC handler through the
	// gateway's loopback connection.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := get(t, base+"/v1/echo/hello", http.Header{"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/echo/hello = %d %s", resp.StatusCode, body(t, resp))
	}
	if got, want := strings.TrimSpace(body(t, resp)), `"echo: hello"`; got != want {
		t.Errorf("gateway body = %s, want %s", got, want)
	}
	r.svc.mu.Lock()
	seen := r.svc.spans
	r.svc.mu.Unlock()
	if len(seen) != 1 || seen[0].TraceID().String() != traceID {
		t.Errorf("trace ids seen by the gRPC handler = %v, want [%s]", seen, traceID)
	}

	// A panic behind the gateway is a 500 from the recovery interceptor, not a crash.
	if resp := get(t, base+"/v1/echo/boom", nil); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("GET /v1/echo/boom = %d, want 500", resp.StatusCode)
	}

	// Both calls went through the server's interceptors: the metrics saw them.
	metrics := body(t, get(t, base+"/metrics", nil))
	for _, want := range []string{
		`switchyard_test_svc_grpc_requests_total{code="OK",method="/switchyard.test.Echo/Echo"} 1`,
		`switchyard_test_svc_grpc_requests_total{code="Internal",method="/switchyard.test.Echo/Boom"} 1`,
		`switchyard_test_svc_http_requests_total{code="200",method="get"}`,
		"go_goroutines",
		"process_",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestHTTPRoutesAndHealthz(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	traces := make(chan trace.TraceID, 1)
	r.srv.HandleHTTP("GET /v1/custom", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		traces <- trace.SpanContextFromContext(req.Context()).TraceID()
		io.WriteString(w, "custom")
	}))
	r.srv.HandleHTTP("GET /v1/panic", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("http boom")
	}))
	r.srv.HandleHTTP("GET /v1/abort", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler) // the client went away: nothing to answer
	}))
	base := "http://" + r.srv.HTTPAddr()

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	resp := get(t, base+"/v1/custom", http.Header{"Traceparent": {"00-" + traceID + "-b7ad6b7169203331-01"}})
	if resp.StatusCode != http.StatusOK || body(t, resp) != "custom" {
		t.Errorf("GET /v1/custom = %d", resp.StatusCode)
	}
	if gotTrace := <-traces; gotTrace.String() != traceID {
		t.Errorf("HandleHTTP route saw trace %s, want %s", gotTrace, traceID)
	}
	if code := get(t, base+"/v1/panic", nil).StatusCode; code != http.StatusInternalServerError {
		t.Errorf("panicking HTTP handler = %d, want 500", code)
	}
	if resp := get(t, base+"/healthz", nil); resp.StatusCode != http.StatusOK || strings.TrimSpace(body(t, resp)) != "SERVING" {
		t.Errorf("/healthz = %d", resp.StatusCode)
	}
	if code := get(t, base+"/no/such/route", nil).StatusCode; code != http.StatusNotFound {
		t.Errorf("unknown route = %d, want 404", code)
	}
	// An aborted request gets no answer, and is counted as a 499: the
	// metrics record only once a handler returns. (The client's transport
	// tries an idempotent request twice on a dropped connection.)
	if resp, err := http.Get(base + "/v1/abort"); err == nil {
		resp.Body.Close()
		t.Errorf("aborted request answered %d", resp.StatusCode)
	}
	metrics := body(t, get(t, base+"/metrics", nil))
	for _, want := range []string{
		`switchyard_test_svc_http_requests_total{code="499",method="get"}`,
		`switchyard_test_svc_http_requests_total{code="500",method="get"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Options.MaxConcurrentStreams reaches the server's transport: with a bound
// of one, a connection's second call waits (as grpc-go's client waits for
// the server's stream quota) until the first ends, then goes through.
func TestMaxConcurrentStreamsQueuesPastTheBound(t *testing.T) {
	r := start(t, Options{MaxConcurrentStreams: 1})
	blocked := make(chan error, 1)
	go func() {
		blocked <- r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Block", wrapperspb.String("x"), new(wrapperspb.StringValue))
	}()
	<-r.svc.blockedIn
	// Without the bound it would be answered at once; it can only time out
	// waiting for the stream Block holds.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := r.conn.Invoke(ctx, "/"+echoServiceName+"/Echo", wrapperspb.String("queued"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a second call with one stream allowed and taken: %v, want DEADLINE_EXCEEDED", err)
	}
	close(r.svc.release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	out := new(wrapperspb.StringValue)
	if err := r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Echo", wrapperspb.String("then"), out); err != nil || out.GetValue() != "echo: then" {
		t.Fatalf("once the stream was free: %v %v", out, err)
	}
}

// Streams are unbounded unless an operator bounds them (the REST gateway's
// calls share one loopback connection, so a bound would bound them all); the
// flag takes 0 for unbounded and refuses what a uint32 cannot hold.
func TestMaxConcurrentStreamsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want uint32
		err  bool
	}{
		{nil, 0, false},
		{[]string{"--max-concurrent-streams=100"}, 100, false},
		{[]string{"--max-concurrent-streams=0"}, 0, false},
		{[]string{"--max-concurrent-streams=-1"}, 0, true},
		{[]string{"--max-concurrent-streams=4294967296"}, 0, true},
	} {
		o := DefaultOptions("scheduler")
		fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.RegisterFlags(fs)
		err := fs.Parse(tc.args)
		if (err != nil) != tc.err || !tc.err && o.MaxConcurrentStreams != tc.want {
			t.Errorf("%v: %d, %v", tc.args, o.MaxConcurrentStreams, err)
		}
	}
}

func TestServersCoexist(t *testing.T) {
	// Same name twice: each has its own registry, so nothing collides.
	a := start(t, Options{Name: "dup", HTTPAddr: "127.0.0.1:0"})
	b := start(t, Options{Name: "dup", HTTPAddr: "127.0.0.1:0"})
	if a.srv.GRPCAddr() == b.srv.GRPCAddr() || a.srv.Registry() == b.srv.Registry() {
		t.Fatal("two servers share an address or a registry")
	}
	var out wrapperspb.StringValue
	if err := a.conn.Invoke(context.Background(), "/"+echoServiceName+"/Echo", wrapperspb.String("a"), &out); err != nil {
		t.Fatal(err)
	}
	metricsB := body(t, get(t, "http://"+b.srv.HTTPAddr()+"/metrics", nil))
	if strings.Contains(metricsB, "Echo") {
		t.Error("a call to server a shows up in server b's metrics")
	}
}

func TestOrderedShutdown(t *testing.T) {
	r := start(t, Options{HTTPAddr: "127.0.0.1:0"})
	var (
		mu     sync.Mutex
		events []string
	)
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	healthNow := func() string {
		resp, err := r.srv.Health().Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return err.Error()
		}
		return resp.GetStatus().String()
	}
	doneNow := func() string {
		select {
		case <-r.srv.Done():
			return "closed"
		default:
			return "open"
		}
	}
	r.srv.OnDrain(func(context.Context) { record("drain hook 1 health=" + healthNow() + " done=" + doneNow()) })
	r.srv.OnDrain(func(context.Context) { record("drain hook 2 health=" + healthNow() + " done=" + doneNow()) })
	r.srv.OnShutdown(func(context.Context) { record("close hook 1 (registered first)") })
	r.srv.OnShutdown(func(context.Context) { record("close hook 2") })

	// An RPC in flight when shutdown starts must finish, not be cut.
	inflight := make(chan error, 1)
	go func() {
		var out wrapperspb.StringValue
		inflight <- r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Block", wrapperspb.String("x"), &out)
	}()
	<-r.svc.blockedIn

	r.cancel()
	// The drain hooks run once Done is closed; the server then waits for the
	// blocked call before it runs the close hooks.
	<-r.srv.Done()
	eventually(t, "both drain hooks ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= 2
	})
	record("release in-flight call")
	close(r.svc.release)
	if err := <-inflight; err != nil {
		t.Errorf("in-flight call was cut: %v", err)
	}
	if err := r.stop(); err != nil {
		t.Errorf("Serve returned %v", err)
	}

	want := []string{
		"drain hook 2 health=NOT_SERVING done=closed",
		"drain hook 1 health=NOT_SERVING done=closed",
		"release in-flight call",
		"close hook 2",
		"close hook 1 (registered first)",
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("shutdown order (-want +got):\n%s", diff)
	}
	if err := Healthcheck(r.srv.GRPCAddr()); err == nil {
		t.Error("server still answers health checks after Serve returned")
	}
}

func TestShutdownDeadlineCutsStuckCalls(t *testing.T) {
	r := start(t, Options{ShutdownTimeout: 50 * time.Millisecond})
	inflight := make(chan error, 1)
	go func() {
		var out wrapperspb.StringValue
		inflight <- r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Block", wrapperspb.String("x"), &out)
	}()
	<-r.svc.blockedIn
	if err := r.stop(); err != nil {
		t.Errorf("Serve returned %v", err)
	}
	if err := <-inflight; err == nil {
		t.Error("a call stuck past the shutdown deadline succeeded; want it cut")
	}
}

func TestServeFailsOnBusyPort(t *testing.T) {
	r := start(t, Options{})
	srv, err := New(Options{Name: "busy", GRPCAddr: r.srv.GRPCAddr(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(context.Background()); err == nil {
		t.Error("Serve on a busy port succeeded")
	}
}

func TestCloseWithoutServe(t *testing.T) {
	srv, err := New(Options{Name: "closed", HTTPAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(context.Background()); err == nil {
		t.Error("Serve after Close succeeded")
	}
}

func TestNewRequiresName(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a name succeeded")
	}
}

func TestRunStopsEverythingOnLoopError(t *testing.T) {
	srv, err := New(Options{Name: "run", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	loopErr := errors.New("loop failed")
	idle := func(context.Context) error { return nil }
	failing := func(ctx context.Context) error {
		// Fail only once the server is up, so Run has something to stop.
		if err := srv.Listen(); err != nil {
			return err
		}
		if err := serving(srv.GRPCAddr()); err != nil {
			return err
		}
		return loopErr
	}
	if err := Run(context.Background(), srv, idle, failing); !errors.Is(err, loopErr) {
		t.Errorf("Run = %v, want %v", err, loopErr)
	}
}

func TestRunReturnsNilOnCancel(t *testing.T) {
	srv, err := New(Options{Name: "run", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	loop := func(ctx context.Context) error {
		if err := serving(srv.GRPCAddr()); err != nil {
			return err
		}
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, srv, loop); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestDialable(t *testing.T) {
	for in, want := range map[string]string{
		":9100":          "127.0.0.1:9100",
		"0.0.0.0:9100":   "127.0.0.1:9100",
		"[::]:9100":      "127.0.0.1:9100",
		"scheduler:9100": "scheduler:9100",
		"127.0.0.1:5":    "127.0.0.1:5",
	} {
		if got := localTarget(in); got != want {
			t.Errorf("localTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMetricName(t *testing.T) {
	srv, err := New(Options{Name: "flash-indexer", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got, want := srv.MetricName("matches_total"), "switchyard_flash_indexer_matches_total"; got != want {
		t.Errorf("MetricName = %q, want %q", got, want)
	}
}

func TestServeWithCancelledContext(t *testing.T) {
	for i := 0; i < 20; i++ { // the race between Serve and shutdown goes either way
		srv, err := New(Options{Name: "cancelled", HTTPAddr: "127.0.0.1:0", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := srv.Serve(ctx); err != nil {
			t.Fatalf("Serve with a done context = %v, want nil", err)
		}
	}
}

// TestCallLogLevels: a failed call is logged once at its code's level with
// the call's fields; a successful one only when DEBUG is on; health checks
// never.
func TestCallLogLevels(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf syncBuffer
		r := start(t, Options{Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))})
		var out wrapperspb.StringValue
		if err := r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Echo", wrapperspb.String("hi"), &out); err != nil {
			t.Fatal(err)
		}
		_ = r.conn.Invoke(context.Background(), "/"+echoServiceName+"/Echo", wrapperspb.String("fail"), &out)
		if _, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		_ = r.stop()
		var calls []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if m["msg"] == "finished call" {
				calls = append(calls, m)
			}
		}
		want := []string{"FailedPrecondition"} // a WARN
		if level == slog.LevelDebug {
			want = []string{"OK", "FailedPrecondition"}
		}
		var got []string
		for _, c := range calls {
			got = append(got, fmt.Sprint(c["grpc.code"]))
			if c["grpc.service"] != echoServiceName || c["grpc.method"] != "Echo" || c["peer.address"] == nil || c["grpc.time_ms"] == nil {
				t.Errorf("call fields: %v", c)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("at %v logged calls %v, want %v:\n%s", level, got, want, buf.String())
		}
		if n := len(calls); n > 0 && calls[n-1]["level"] != "WARN" {
			t.Errorf("failed call logged at %v, want WARN", calls[n-1]["level"])
		}
	}
}

// A stream that ends UNAVAILABLE is a WARN while the server serves and an
// INFO once it drains (its service ending its streams as it stops).
func TestCallLogUnavailableWhileDraining(t *testing.T) {
	var buf syncBuffer
	draining := make(chan struct{})
	l := callLog{slog.New(slog.NewJSONHandler(&buf, nil)), draining}
	unavailable := status.Error(codes.Unavailable, "shutting down")
	l.finished(context.Background(), "/x.v1.S/Watch", "server_stream", time.Now(), unavailable, nil)
	close(draining)
	l.finished(context.Background(), "/x.v1.S/Watch", "server_stream", time.Now(), unavailable, nil)
	l.finished(context.Background(), "/x.v1.S/Get", "unary", time.Now(), status.Error(codes.Internal, "broken"), nil)
	var levels []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		levels = append(levels, fmt.Sprint(m["level"]))
	}
	if want := []string{"WARN", "INFO", "ERROR"}; !slices.Equal(levels, want) {
		t.Fatalf("levels %v, want %v", levels, want)
	}
}

// A failed call whose request names its turn (GetRequestId) is logged with
// that id: a notice's caller logs nothing, so the server's line is the
// only one, and must be found with the turn's others.
func TestCallLogNamesTheRequest(t *testing.T) {
	var buf syncBuffer
	intercept := logUnary(slog.New(slog.NewJSONHandler(&buf, nil)))
	fail := func(context.Context, any) (any, error) { return nil, status.Error(codes.Internal, "broken") }
	for _, req := range []any{&schedulerv1.FinishRequestRequest{RequestId: "chatcmpl-7"}, wrapperspb.String("no id")} {
		_, _ = intercept(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: "/x.v1.S/Call"}, fail)
	}
	// A stream: the id its first message named.
	stream := logStream(slog.New(slog.NewJSONHandler(&buf, nil)), nil)
	_ = stream(nil, recvStream{&enginev1.GenerateRequest{RequestId: "chatcmpl-8"}}, &grpc.StreamServerInfo{FullMethod: "/x.v1.S/Gen", IsServerStream: true},
		func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(enginev1.GenerateRequest)); err != nil {
				return err
			}
			return status.Error(codes.Internal, "broken")
		})
	var ids []any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		ids = append(ids, m["request_id"])
	}
	if want := []any{"chatcmpl-7", nil, "chatcmpl-8"}; !slices.Equal(ids, want) {
		t.Fatalf("request ids logged %v, want %v", ids, want)
	}
}

// recvStream is a server stream whose one message is msg.
type recvStream struct{ msg proto.Message }

func (r recvStream) RecvMsg(m any) error {
	proto.Merge(m.(proto.Message), r.msg)
	return nil
}
func (recvStream) SendMsg(any) error            { return nil }
func (recvStream) SetHeader(metadata.MD) error  { return nil }
func (recvStream) SendHeader(metadata.MD) error { return nil }
func (recvStream) SetTrailer(metadata.MD)       {}
func (recvStream) Context() context.Context     { return context.Background() }
