package frontend

import (
	"context"

	"switchyard.dev/services/servicekit"
)

// Main runs the frontend as a process: flags (with SWITCHYARD_* environment
// variables), telemetry, server, until ctx is done. Both the frontend binary
// and `switchyard serve frontend` run it.
func Main(ctx context.Context, args []string) error {
	cfg := DefaultConfig()
	return servicekit.Serve(ctx, "frontend", args, cfg.RegisterFlags, func(srv *servicekit.Server) (servicekit.Service, error) {
		return New(cfg, srv)
	})
}
