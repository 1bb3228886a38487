package servicekit

import (
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"
)

// DefaultShutdownTimeout bounds the drain of in-flight HTTP requests and gRPC calls
// when Options leaves ShutdownTimeout zero. It stays under compose's stop_grace_period
// (15s) with room for the cut and the OnShutdown hooks (closeGrace each).
const DefaultShutdownTimeout = 10 * time.Second

// DefaultShutdownNotice is how long a stopping service goes on serving after it
// turned NOT_SERVING, so that its peers notice before anything is refused: health
// Watch streams are told at once, a peer's health check or a load balancer's
// readiness probe within its interval. It is short on purpose: the notice is part of
// ShutdownTimeout, not added to it, so compose's stop_grace_period (15s) still covers
// the whole shutdown, and every second of notice is a second less for the drain.
const DefaultShutdownNotice = time.Second

// MaxConcurrentStreams (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: the gRPC
// streams one connection holds open at once) is unbounded unless an operator
// bounds it, as grpc-go and etcd leave it: a bound must sit above the most
// streams any one connection legitimately holds, and the REST gateway sends
// every REST call of every client over one loopback connection to its own
// server (a scheduler's REST Routes may wait minutes in admission, and past
// the bound its REST finishes and heartbeats would queue behind them).
// Among mesh peers the most is a frontend's to one engine shim or
// scheduler: a Generate stream per turn in flight, or, while its call
// stream is not open, a unary Route per turn, up to its
// --max-inflight-requests (2048 by default), plus a few long-lived ones.
// Peers on the mesh's gRPC ports are authenticated identities.

// Ports are the default gRPC and HTTP ports of each service: what compose and
// `switchyard serve` use. `switchyard up` overrides them with loopback ports.
var Ports = map[string]struct{ GRPC, HTTP int }{
	"frontend":               {GRPC: 8001, HTTP: 8000},
	"scheduler":              {GRPC: 9100, HTTP: 9101},
	"flash-indexer":          {GRPC: 9200, HTTP: 9201},
	"session-prefix-indexer": {GRPC: 9300, HTTP: 9301},
	"kvhint-emitter":         {GRPC: 9400, HTTP: 9401},
	"engine-shim":            {GRPC: 9500, HTTP: 9501},
	"kv-pool":                {GRPC: 9600, HTTP: 9601},
}

// LocalAddr is a service's default gRPC address on this host (loopback, its
// port in Ports), what its peers dial unless told otherwise; "" for a service
// Ports does not name.
func LocalAddr(service string) string {
	p, ok := Ports[service]
	if !ok {
		return ""
	}
	return "127.0.0.1:" + strconv.Itoa(p.GRPC)
}

// Options configures one service process.
type Options struct {
	// Name is the service name ("scheduler", "flash-indexer", ...), used in logs,
	// metric names and traces.
	Name string
	// GRPCAddr is the gRPC listen address, e.g. "127.0.0.1:0" or ":9100".
	GRPCAddr string
	// HTTPAddr is the listen address for the gateway, /metrics and /healthz;
	// "" disables HTTP.
	HTTPAddr string
	// Logger is where the server logs; nil means slog JSON to stderr at LogLevel with
	// the attribute service=Name.
	Logger *slog.Logger
	// LogLevel is the level of the default logger (ignored when Logger is set).
	LogLevel slog.Level
	// ShutdownTimeout bounds the drain, from the moment health turns NOT_SERVING
	// until every in-flight HTTP request and gRPC call has finished; zero means
	// DefaultShutdownTimeout. Past it, what is still in flight is cut, and the
	// OnShutdown hooks run (see shutdown.go).
	ShutdownTimeout time.Duration
	// ShutdownNotice is how long shutdown goes on accepting connections and calls
	// after health turned NOT_SERVING, for peers to notice and stop sending work
	// (see shutdown.go); it counts against ShutdownTimeout. Zero waits not at all:
	// tests, and `switchyard up`, which stops its services in order itself.
	// DefaultOptions sets DefaultShutdownNotice.
	ShutdownNotice time.Duration
	// TLS turns on mutual TLS for every listener and for the clients made
	// with Server.Dial (tls.go), and the mesh's authorization (authz.go).
	TLS TLSOptions
	// HealthAddr, when set, is a plaintext gRPC listener serving only
	// grpc.health.v1, for probes that do not speak TLS (the kubelet's native
	// gRPC probes, container healthchecks); health is on GRPCAddr too.
	HealthAddr string
	// PublicHTTP marks the HTTP port as the public API (the frontend's):
	// with TLS on it still asks no client certificate, and serves TLS only
	// with PublicCertFile and PublicKeyFile. Its gateway calls are
	// TenantIdentity's: the service authenticates them by API key.
	PublicHTTP                    bool
	PublicCertFile, PublicKeyFile string
	// Pprof serves the Go profiles at /debug/pprof/ on the HTTP port, to
	// operators only (debug.go). Off by default.
	Pprof bool
	// MaxConcurrentStreams bounds the gRPC streams each connection holds
	// open at once; zero leaves them unbounded (see the flag's comment).
	MaxConcurrentStreams uint32
}

// DefaultOptions returns the options of a service with its default ports (Ports) on all
// interfaces. An unknown name gets loopback ports chosen at Listen.
func DefaultOptions(name string) Options {
	o := Options{Name: name, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		ShutdownTimeout: DefaultShutdownTimeout, ShutdownNotice: DefaultShutdownNotice}
	if p, ok := Ports[name]; ok {
		o.GRPCAddr = ":" + strconv.Itoa(p.GRPC)
		o.HTTPAddr = ":" + strconv.Itoa(p.HTTP)
	}
	o.PublicHTTP = name == "frontend"
	return o
}

// RegisterFlags registers --grpc-addr, --http-addr, --health-addr, --shutdown-timeout,
// --shutdown-notice, --log-level, --pprof, --max-concurrent-streams and the mutual TLS flags (--tls-cert, --tls-key, --tls-ca, --trust-domain,
// --insecure; a public HTTP port also --public-tls-cert and --public-tls-key) with the
// current values as defaults. With EnvFlags they read SWITCHYARD_GRPC_ADDR and so on.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.HealthAddr, "health-addr", o.HealthAddr, "plaintext gRPC listen address serving only grpc.health.v1, for probes that cannot speak TLS (\"\" = none; health is on --grpc-addr too)")
	o.TLS.registerFlags(fs)
	if o.PublicHTTP {
		fs.StringVar(&o.PublicCertFile, "public-tls-cert", o.PublicCertFile, "certificate (PEM) of the public HTTP APIs; with --public-tls-key they serve HTTPS")
		fs.StringVar(&o.PublicKeyFile, "public-tls-key", o.PublicKeyFile, "key (PEM) of --public-tls-cert")
	}
	fs.StringVar(&o.GRPCAddr, "grpc-addr", o.GRPCAddr, "gRPC listen address")
	fs.StringVar(&o.HTTPAddr, "http-addr", o.HTTPAddr, `HTTP listen address (gateway, /metrics, /healthz); "" disables HTTP`)
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "how long in-flight requests and streams may take to finish on shutdown before they are cut")
	fs.DurationVar(&o.ShutdownNotice, "shutdown-notice", o.ShutdownNotice, "how long shutdown goes on serving after health turns NOT_SERVING, for peers to notice (part of --shutdown-timeout; 0 = none)")
	fs.TextVar(&o.LogLevel, "log-level", o.LogLevel, "log level: DEBUG (also every successful gRPC call), INFO, WARN or ERROR")
	fs.BoolVar(&o.Pprof, "pprof", o.Pprof, "serve the Go profiles at /debug/pprof/ on the HTTP port, to operators only (an admin certificate with mutual TLS; the frontend: an operator API key)")
	fs.Func("max-concurrent-streams", "gRPC streams one connection may hold open at once; past it the peer's next stream waits (0 = unbounded, the default). "+
		"A bound also bounds the service's REST calls, which share one loopback connection, and must sit above every frontend's --max-inflight-requests", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("want a whole number from 0 (unbounded) to %d", uint32(math.MaxUint32))
		}
		o.MaxConcurrentStreams = uint32(n)
		return nil
	})
}

func (o Options) withDefaults() Options {
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	return o
}
