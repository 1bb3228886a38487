// Package servicekit is the shell every Switchyard service runs in: one gRPC server with
// OpenTelemetry, request logging, metrics and panic recovery; grpc.health.v1 and server
// reflection; an HTTP port with the grpc-gateway REST mapping, /metrics and /healthz;
// ordered graceful shutdown (health NOT_SERVING and a short notice for peers, stop
// accepting, drain in-flight calls, then close clients: shutdown.go); call streams, which
// carry a client's unary calls over one long-lived stream (calls.go, CallConn); flags with
// SWITCHYARD_* environment variables; and the `healthcheck` subcommand that container
// healthchecks exec.
//
// A service main is usually one line, servicekit.Main(name, run) with run calling the
// package-level Serve (flags, env, telemetry, server, service, Run), or ServeConfig
// for a service built from a Config of its own. Spelled out, it does this (see Main
// and Run):
//
//	func main() {
//		servicekit.Main("scheduler", func(ctx context.Context, args []string) error {
//			fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
//			opts := servicekit.DefaultOptions("scheduler")
//			opts.RegisterFlags(fs)
//			cfg := scheduler.DefaultConfig()
//			cfg.RegisterFlags(fs)
//			if err := servicekit.ParseFlags(fs, args); err != nil {
//				return err
//			}
//			shutdown, err := servicekit.SetupTelemetry(ctx, opts.Name)
//			if err != nil {
//				return err
//			}
//			defer shutdown(context.Background())
//			srv, err := servicekit.New(opts)
//			if err != nil {
//				return err
//			}
//			svc, err := scheduler.New(cfg, srv)
//			if err != nil {
//				return err
//			}
//			return servicekit.Run(ctx, srv, svc.Run)
//		})
//	}
//
// Several Servers coexist in one process (`switchyard up`): a Server keeps all of its
// state (listeners, Prometheus registry, health, gateway mux) to itself. The only
// process-wide state servicekit touches is the OpenTelemetry global tracer provider and
// propagator, set by SetupTelemetry.
//
// servicekit must never contain service logic or know any service's API: it only knows
// grpc.health.v1 and reflection.
package servicekit
