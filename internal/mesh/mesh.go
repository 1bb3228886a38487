// Package mesh runs every Switchyard service in one process, each on its own
// loopback ports and talking real gRPC to the others, with simulated engines
// behind the shims. It is what `switchyard up` runs and what the end-to-end
// tests drive: the same services, the same wire, as a deployment of separate
// processes.
package mesh

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"switchyard.dev/pkg/routing"
	"switchyard.dev/services/engine-shim"
	"switchyard.dev/services/flash-indexer"
	"switchyard.dev/services/frontend"
	"switchyard.dev/services/kv-pool"
	"switchyard.dev/services/kvhint-emitter"
	"switchyard.dev/services/scheduler"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/session-prefix-indexer"
)

// Config says what to run.
type Config struct {
	// Workers is the number of simulated GPU workers (engine shims).
	Workers int
	// Schedulers, Frontends and FlashIndexers are how many replicas of
	// each run (1 when ≤ 0): schedulers sharing the fleet's admission,
	// frontends that any turn may go to, flash indexers the schedulers
	// spread lookups over (docs/scale-out.md).
	Schedulers, Frontends, FlashIndexers int
	// FrontendHTTPAddr is where the inference APIs listen (":8000").
	FrontendHTTPAddr string
	// Host is the interface every other listener binds, on a free port.
	Host string
	// Policy is the scheduler's routing policy; empty for its default.
	Policy string
	// GPUBlocks, when positive, sizes each simulated worker's KV cache.
	GPUBlocks int
	// SpeedUp divides simulated engine time (1 = real time).
	SpeedUp float64
	// PoolPages, when positive, starts the kv-pool service (a shared KV pool
	// of this many pages) and attaches every simulated engine and the flash
	// indexer to it.
	PoolPages int
	// Shim, when set, adjusts each engine shim's configuration after the
	// defaults above (e.g. to put a real engine behind worker i).
	Shim func(i int, c *engineshim.Config)
	// Frontend, when set, adjusts the frontend's configuration (API keys,
	// limits) before it starts.
	Frontend func(c *frontend.Config)
	// Scheduler, when set, adjusts every scheduler's configuration
	// (admission, timings) after the settings above.
	Scheduler func(c *scheduler.Config)
	// Logger receives every service's logs, each with its service attribute.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for every worker to be registered and
	// indexed.
	ReadyTimeout time.Duration
	// ModelAliases are other model names the frontend accepts for the
	// served one (a harness's own model names); any other name is a 404.
	ModelAliases []string
	// SimToolCalls makes the simulated engines answer a user message that
	// comes with tools by calling the first declared tool (the frontend's
	// SimToolCalls), so a real agent harness runs tool-using turns against
	// the mesh without a model.
	SimToolCalls bool
	// ServerTiming: the frontends add Server-Timing to answers
	// (frontend.Config.ServerTiming).
	ServerTiming bool
	// Pprof serves every service's /debug/pprof/ (servicekit.Options.Pprof);
	// in one process each is the whole mesh's profile, its samples labelled
	// by ServiceLabel.
	Pprof bool
	// Secure runs the mesh on mutual TLS: a throwaway CA held in memory
	// (Mesh.CA) issues every service its certificate, and the mesh's
	// authorization applies as in production.
	Secure bool
}

// DefaultConfig is four workers behind a frontend on loopback port 8000.
func DefaultConfig() Config {
	return Config{
		Workers:          4,
		FrontendHTTPAddr: "127.0.0.1:8000",
		Host:             "127.0.0.1",
		SpeedUp:          1,
		ReadyTimeout:     30 * time.Second,
	}
}

// Endpoint is where one service listens.
type Endpoint struct {
	Service string // "scheduler", "engine-shim", ...
	Name    string // the worker id for shims, else the service name
	GRPC    string
	HTTP    string
}

// Mesh is a running mesh.
type Mesh struct {
	// Endpoints in start order: schedulers, indexers, emitter, shims,
	// frontends.
	Endpoints []Endpoint

	// CA issued the services' certificates when Config.Secure; callers
	// (grpcurl, tests) get theirs from it too.
	CA *servicekit.DevCA

	// Policy is the schedulers' routing policy (Config.Policy, or their
	// default).
	Policy routing.Policy

	log      *slog.Logger
	pprof    bool
	hosts    []string // what the services' certificates name (certHosts)
	procs    []*process
	stopOnce sync.Once
}

// process is one service: its server, its background loops and how to stop it.
type process struct {
	ep     Endpoint
	srv    *servicekit.Server
	cancel context.CancelFunc // nil until the service runs
	done   chan struct{}      // closed when it has stopped
	err    error
}

// Start brings the mesh up and returns once every worker is registered with the
// scheduler and subscribed to by the flash indexer, or fails. Cancelling ctx
// stops every service, frontend first; Wait returns when all have stopped.
func Start(ctx context.Context, cfg Config) (*Mesh, error) {
	d := DefaultConfig()
	if cfg.Workers <= 0 {
		cfg.Workers = d.Workers
	}
	if cfg.Host == "" {
		cfg.Host = d.Host
	}
	if cfg.FrontendHTTPAddr == "" {
		cfg.FrontendHTTPAddr = d.FrontendHTTPAddr
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = d.ReadyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Mesh{log: cfg.Logger, pprof: cfg.Pprof}
	if cfg.Secure {
		ca, err := servicekit.NewDevCA("")
		if err != nil {
			return nil, err
		}
		m.CA, m.hosts = ca, certHosts(ctx, cfg.Host, cfg.FrontendHTTPAddr)
	}

	// Bind every listener first, so each service can be told its peers'
	// addresses before any of them starts.
	any := net.JoinHostPort(cfg.Host, "0")
	var bindErr error // the first bind that failed; bind does nothing after it
	bind := func(service, name, httpAddr string) *servicekit.Server {
		if bindErr != nil {
			return nil
		}
		srv, err := m.server(service, name, any, httpAddr)
		bindErr = err
		return srv
	}
	scheds := replicas(cfg.Schedulers, "scheduler", func(name string) *servicekit.Server { return bind("scheduler", name, any) })
	flashes := replicas(cfg.FlashIndexers, "flash-indexer", func(name string) *servicekit.Server { return bind("flash-indexer", name, any) })
	lineage := bind("session-prefix-indexer", "session-prefix-indexer", any)
	hints := bind("kvhint-emitter", "kvhint-emitter", any)
	var pool *servicekit.Server
	if cfg.PoolPages > 0 {
		pool = bind("kv-pool", "kv-pool", any)
	}
	shims := make([]*servicekit.Server, cfg.Workers)
	for i := range shims {
		shims[i] = bind("engine-shim", workerID(i), any)
	}
	fronts := replicas(cfg.Frontends, "frontend", func(name string) *servicekit.Server {
		addr := any // the first on the configured port, the others anywhere
		if name == "frontend" || name == "frontend-0" {
			addr = cfg.FrontendHTTPAddr
		}
		return bind("frontend", name, addr)
	})
	if bindErr != nil {
		return nil, m.abort(bindErr)
	}
	schedList, flashList := grpcAddrs(scheds), grpcAddrs(flashes)

	schedCfg := scheduler.DefaultConfig()
	schedCfg.FlashIndexerAddr = flashList
	if len(scheds) > 1 {
		schedCfg.PeerAddrs = schedList
	}
	if cfg.Policy != "" {
		schedCfg.Policy = cfg.Policy
	}
	if cfg.Scheduler != nil {
		cfg.Scheduler(&schedCfg)
	}
	m.Policy = routing.Policy(schedCfg.Policy)
	if cfg.PoolPages > 0 {
		// Credit pool blocks as Dynamo does when a shared cache is on.
		schedCfg.Routing.SharedCacheMultiplier = routing.SharedPoolCacheMultiplier
	}
	for _, sched := range scheds {
		if err := m.run(ctx, sched, func() (runner, error) { return scheduler.New(schedCfg, sched) }); err != nil {
			return nil, m.abort(err)
		}
	}

	poolAddr := ""
	if pool != nil {
		poolCfg := kvpoolservice.DefaultConfig()
		poolCfg.CapacityPages = cfg.PoolPages
		if err := m.run(ctx, pool, func() (runner, error) { return kvpoolservice.New(poolCfg, pool) }); err != nil {
			return nil, m.abort(err)
		}
		poolAddr = dialAddr(pool)
	}

	flashCfg := flashindexer.DefaultConfig()
	flashCfg.SchedulerAddr = schedList
	flashCfg.PoolAddr = poolAddr
	for _, flash := range flashes {
		if err := m.run(ctx, flash, func() (runner, error) { return flashindexer.New(flashCfg, flash) }); err != nil {
			return nil, m.abort(err)
		}
	}

	lineageCfg := sessionindexer.DefaultConfig()
	lineageCfg.SchedulerAddr = schedList
	if err := m.run(ctx, lineage, func() (runner, error) { return sessionindexer.New(lineageCfg, lineage) }); err != nil {
		return nil, m.abort(err)
	}

	hintsCfg := kvhintemitter.DefaultConfig()
	hintsCfg.SchedulerAddr = schedList
	hintsCfg.SessionIndexerAddr = dialAddr(lineage)
	if err := m.run(ctx, hints, func() (runner, error) { return kvhintemitter.New(hintsCfg, hints) }); err != nil {
		return nil, m.abort(err)
	}

	for i, srv := range shims {
		shimCfg := engineshim.DefaultConfig()
		shimCfg.WorkerID = workerID(i)
		shimCfg.SchedulerAddr = schedList
		shimCfg.AdvertiseAddr = dialAddr(srv)
		shimCfg.Seed = int64(i + 1)
		shimCfg.PoolAddr = poolAddr
		if cfg.GPUBlocks > 0 {
			shimCfg.NumGPUBlocks = cfg.GPUBlocks
		}
		if cfg.SpeedUp > 0 {
			shimCfg.SpeedUp = cfg.SpeedUp
		}
		if cfg.Shim != nil {
			cfg.Shim(i, &shimCfg)
		}
		if err := m.run(ctx, srv, func() (runner, error) { return engineshim.New(shimCfg, srv) }); err != nil {
			return nil, m.abort(err)
		}
	}

	frontCfg := frontend.DefaultConfig()
	frontCfg.SchedulerAddr = schedList
	frontCfg.KVHintEmitterAddr = dialAddr(hints)
	frontCfg.ModelAliases = cfg.ModelAliases
	frontCfg.SimToolCalls = cfg.SimToolCalls
	frontCfg.ServerTiming = cfg.ServerTiming
	if cfg.Frontend != nil {
		cfg.Frontend(&frontCfg)
	}
	for _, front := range fronts {
		if err := m.run(ctx, front, func() (runner, error) { return frontend.New(frontCfg, front) }); err != nil {
			return nil, m.abort(err)
		}
	}

	readyCtx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	if err := waitReady(readyCtx, m.AdminDialOptions(), servicekit.SplitList(schedList), servicekit.SplitList(flashList), cfg.Workers,
		func() int { return indexersAsked(scheds) }); err != nil {
		return nil, m.abort(fmt.Errorf("mesh not ready: %w", err))
	}
	return m, nil
}

func workerID(i int) string { return fmt.Sprintf("worker-%d", i) }

// replicas binds n (at least 1) replicas of a service: one is named for the
// service, several "<service>-<i>".
func replicas(n int, service string, bind func(name string) *servicekit.Server) []*servicekit.Server {
	if n <= 1 {
		return []*servicekit.Server{bind(service)}
	}
	out := make([]*servicekit.Server, n)
	for i := range out {
		out[i] = bind(fmt.Sprintf("%s-%d", service, i))
	}
	return out
}

// grpcAddrs is the comma-separated list of the servers' gRPC addresses
// ("" once a bind failed).
func grpcAddrs(srvs []*servicekit.Server) string {
	var list []string
	for _, s := range srvs {
		if s == nil {
			return ""
		}
		list = append(list, dialAddr(s))
	}
	return strings.Join(list, ",")
}

// certHosts is what a secure mesh's certificates name for clients that check
// host names (grpcurl, curl): localhost, and the host the listeners bind
// (--host, the frontend's address) when it is a specific one, with the
// addresses a name resolves to: a listener bound by name reports one of
// them, which the table's commands then dial.
func certHosts(ctx context.Context, host, frontendAddr string) []string {
	hosts := []string{"localhost"}
	add := func(h string) {
		// localhost's own names its addresses (servicekit.DevCA.Issue);
		// another loopback address, 127.0.0.2, needs naming.
		ip := net.ParseIP(h)
		if h == "" || h == "localhost" || ip != nil && (ip.IsUnspecified() || ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback)) ||
			slices.Contains(hosts, h) {
			return
		}
		hosts = append(hosts, h)
	}
	fh, _, err := net.SplitHostPort(frontendAddr)
	if err != nil {
		fh = ""
	}
	for _, h := range []string{host, fh} {
		add(h)
		if net.ParseIP(h) == nil && h != "" && h != "localhost" {
			addrs, _ := net.DefaultResolver.LookupHost(ctx, h) // one that does not resolve fails to bind anyway
			for _, a := range addrs {
				add(a)
			}
		}
	}
	return hosts
}

// dialAddr is the address the mesh's services reach srv's gRPC server at
// (DialAddr of where it listens): every peer runs in this process.
func dialAddr(srv *servicekit.Server) string { return DialAddr(srv.GRPCAddr()) }

// DialAddr turns a listen address into one a client on this machine can
// dial: an unspecified host (none, 0.0.0.0, or ::, which a listener reports
// as "[::]") becomes localhost. A wildcard is no address to register with
// the scheduler, to hand a peer or to print, and no host the certificates
// of a secure mesh name.
func DialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort("localhost", port)
	}
	return addr
}

// AdminDialOptions are the dial options of an operator's client of the mesh:
// an admin certificate from CA when the mesh is secure, none otherwise.
func (m *Mesh) AdminDialOptions() []grpc.DialOption {
	if m.CA == nil {
		return nil
	}
	src, err := m.CA.Source(servicekit.Identity{Service: servicekit.AdminIdentity})
	if err != nil {
		panic(err) // issuing from a CA we made only fails if crypto/rand does
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(servicekit.ClientCredentials(src, m.CA.TrustDomain))}
}

// ServiceLabel is the pprof label naming the service a goroutine belongs to
// ("frontend", "scheduler", ...): a profile of a mesh's process, split by
// it, is the CPU each service spent (the calls it makes included, as a
// separate process's CPU would be).
const ServiceLabel = "service"

// runner is what every service's New returns.
type runner interface {
	Run(ctx context.Context) error
}

// server builds and binds one service's server.
func (m *Mesh) server(service, name, grpcAddr, httpAddr string) (*servicekit.Server, error) {
	opts := servicekit.DefaultOptions(service)
	opts.GRPCAddr, opts.HTTPAddr = grpcAddr, httpAddr
	opts.Pprof = m.pprof
	// No notice for peers: stop stops the services in order, the frontend
	// first, so nobody is left sending to the one that stops.
	opts.ShutdownNotice = 0
	opts.Logger = m.log.With("service", service)
	id := servicekit.Identity{Service: service}
	switch {
	case service == "engine-shim":
		opts.Logger = opts.Logger.With("worker", name)
		id.Instance = name
	case name != service:
		opts.Logger = opts.Logger.With("replica", name)
	}
	if m.CA != nil {
		src, err := m.CA.Source(id, m.hosts...)
		if err != nil {
			return nil, err
		}
		opts.TLS.Source = src
	}
	srv, err := servicekit.New(opts)
	if err != nil {
		return nil, err
	}
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	m.procs = append(m.procs, &process{
		ep:   Endpoint{Service: service, Name: name, GRPC: srv.GRPCAddr(), HTTP: srv.HTTPAddr()},
		srv:  srv,
		done: make(chan struct{}),
	})
	m.Endpoints = append(m.Endpoints, m.procs[len(m.procs)-1].ep)
	return srv, nil
}

// run builds the service on srv and serves it in the background.
func (m *Mesh) run(ctx context.Context, srv *servicekit.Server, build func() (runner, error)) error {
	p := m.proc(srv)
	// Every goroutine the service starts, building it (its clients' own)
	// and running it, carries its label, so a CPU profile of the process
	// splits by service (ServiceLabel).
	labelled := pprof.WithLabels(ctx, pprof.Labels(ServiceLabel, p.ep.Service))
	pprof.SetGoroutineLabels(labelled)
	svc, err := build()
	pprof.SetGoroutineLabels(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", p.ep.Name, err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(labelled))
	p.cancel = cancel
	go func() {
		defer close(p.done)
		pprof.SetGoroutineLabels(pctx)
		p.err = servicekit.Run(pctx, srv, svc.Run)
	}()
	// Stop everything, in order, when the caller's context ends.
	if p.ep.Service == "frontend" {
		go func() {
			<-ctx.Done()
			m.stop()
		}()
	}
	return nil
}

func (m *Mesh) proc(srv *servicekit.Server) *process {
	for _, p := range m.procs {
		if p.srv == srv {
			return p
		}
	}
	panic("mesh: server not bound by Mesh.server")
}

// stopOrder is the order in which a whole mesh stops, so that no service
// sees a peer it depends on leave first (which it would rightly report as a
// fault): the frontends stop taking requests and drain; then those that
// follow the shims and the schedulers (the hint emitter, the indexers);
// then the shims, which deregister; the pool they wrote to; and last the
// schedulers.
var stopOrder = []string{"frontend", "kvhint-emitter", "session-prefix-indexer", "flash-indexer", "engine-shim", "kv-pool", "scheduler"}

// stop stops the services in stopOrder, the replicas of one service
// together: all are told to stop before any is waited for, so that none
// sees a peer replica leave while it still runs (a scheduler would report
// the peer it polls as not answering). Servers bound but never run are
// just closed.
func (m *Mesh) stop() {
	m.stopOnce.Do(func() {
		procs := slices.Clone(m.procs)
		slices.SortStableFunc(procs, func(a, b *process) int {
			return cmp.Compare(stopRank(a.ep.Service), stopRank(b.ep.Service))
		})
		for len(procs) > 0 {
			n := 1
			for n < len(procs) && stopRank(procs[n].ep.Service) == stopRank(procs[0].ep.Service) {
				n++
			}
			for _, p := range procs[:n] {
				if p.cancel == nil {
					p.srv.Close()
					close(p.done)
					continue
				}
				p.cancel()
			}
			for _, p := range procs[:n] {
				<-p.done
			}
			procs = procs[n:]
		}
	})
}

// stopRank is a service's place in stopOrder (any other stops with the
// schedulers).
func stopRank(service string) int {
	if i := slices.Index(stopOrder, service); i >= 0 {
		return i
	}
	return len(stopOrder) - 1
}

// abort stops whatever started and returns err.
func (m *Mesh) abort(err error) error {
	m.stop()
	return err
}

// Wait blocks until every service has stopped and returns their errors.
func (m *Mesh) Wait() error {
	var errs []error
	for _, p := range m.procs {
		<-p.done
		if p.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.ep.Name, p.err))
		}
	}
	return errors.Join(errs...)
}

// Endpoint returns the first endpoint of a service.
func (m *Mesh) Endpoint(service string) Endpoint {
	for _, ep := range m.Endpoints {
		if ep.Service == service {
			return ep
		}
	}
	return Endpoint{}
}
