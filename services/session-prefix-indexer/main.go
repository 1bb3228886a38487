package sessionindexer

import (
	"context"
	"flag"

	"switchyard.dev/services/servicekit"
)

// Main runs the session-prefix indexer as a process: flags (with SWITCHYARD_*
// environment variables), telemetry, server, until ctx is done. Both the
// session-prefix-indexer binary and `switchyard serve session-prefix-indexer` run it.
func Main(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("session-prefix-indexer", flag.ContinueOnError)
	opts := servicekit.DefaultOptions("session-prefix-indexer")
	opts.RegisterFlags(fs)
	cfg := DefaultConfig()
	cfg.RegisterFlags(fs)
	if err := servicekit.ParseFlags(fs, args); err != nil {
		return err
	}
	shutdown, err := servicekit.SetupTelemetry(ctx, opts.Name)
	if err != nil {
		return err
	}
	defer shutdown(context.WithoutCancel(ctx))
	srv, err := servicekit.New(opts)
	if err != nil {
		return err
	}
	svc, err := New(cfg, srv)
	if err != nil {
		return err
	}
	return servicekit.Run(ctx, srv, svc.Run)
}
