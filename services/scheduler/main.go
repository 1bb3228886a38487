package scheduler

import (
	"context"

	"switchyard.dev/services/servicekit"
)

// Main runs the scheduler as a process: flags (with SWITCHYARD_* environment
// variables), telemetry, server, until ctx is done. Both the scheduler binary
// and `switchyard serve scheduler` run it.
func Main(ctx context.Context, args []string) error {
	cfg := DefaultConfig()
	return servicekit.Serve(ctx, "scheduler", args, cfg.RegisterFlags, func(srv *servicekit.Server) (servicekit.Service, error) {
		return New(cfg, srv)
	})
}
