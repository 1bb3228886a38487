package servicekit

import (
	"context"
	"flag"
	"fmt"
)

// Service is what a service package builds on a Server: its background loops
// (event subscriptions, lease checks, ticks) run by Run until ctx is done.
type Service interface {
	Run(ctx context.Context) error
}

// Serve is the body of every service's Main: it registers the server's flags
// (--grpc-addr, --http-addr, ...) and the service's own (registerFlags), parses
// args with SWITCHYARD_* environment fallbacks, sets up telemetry, builds the
// server and the service, and runs both until ctx is done. The service binary
// (via Main) and `switchyard serve <name>` both call it, so the two behave the
// same.
func Serve(ctx context.Context, name string, args []string, registerFlags func(*flag.FlagSet), build func(*Server) (Service, error)) error {
	fs, opts := ServiceFlags(name, registerFlags)
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	shutdown, err := SetupTelemetry(ctx, opts.Name)
	if err != nil {
		return err
	}
	defer shutdown(context.WithoutCancel(ctx))
	srv, err := New(*opts)
	if err != nil {
		return err
	}
	svc, err := build(srv)
	if err != nil {
		srv.Close()
		return err
	}
	return Run(ctx, srv, svc.Run)
}

// ServiceFlags is the command line of the service called name, as Serve
// parses it: the server's options (bound to the returned Options) and the
// flags registerFlags adds. The Helm chart's schema lists each service's
// flag names from it (cmd/switchyard's TestChartSchemaNamesEachServicesFlags).
func ServiceFlags(name string, registerFlags func(*flag.FlagSet)) (*flag.FlagSet, *Options) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: %[1]s [flags]
       %[1]s healthcheck [--addr host:port]   exit 0 if the service answers SERVING (container healthchecks)
       %[1]s certs --out DIR [flags]          write a development CA and the mesh's certificates

Flags (each also read from SWITCHYARD_<FLAG>: upper case, dashes as underscores):
`, name)
		fs.PrintDefaults()
	}
	opts := DefaultOptions(name)
	opts.RegisterFlags(fs)
	registerFlags(fs)
	return fs, &opts
}

// ServeConfig is Serve for a service built from a Config of its own, the
// whole of a service's Main: servicekit.ServeConfig(ctx, name, args,
// DefaultConfig(), New). cfg's RegisterFlags adds the service's flags with
// cfg's values as defaults, and newService builds the service from what they
// parsed to.
func ServeConfig[C any, PC interface {
	*C
	RegisterFlags(*flag.FlagSet)
}, S Service](ctx context.Context, name string, args []string, cfg C, newService func(C, *Server) (S, error)) error {
	return Serve(ctx, name, args, PC(&cfg).RegisterFlags, func(srv *Server) (Service, error) {
		return newService(cfg, srv)
	})
}
