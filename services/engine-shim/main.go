package engineshim

import (
	"context"

	"switchyard.dev/services/servicekit"
)

// Main runs the engine shim as a process: flags (with SWITCHYARD_* environment
// variables), telemetry, server, until ctx is done. Both the engine-shim binary
// and `switchyard serve engine-shim` run it.
func Main(ctx context.Context, args []string) error {
	cfg := DefaultConfig()
	return servicekit.Serve(ctx, "engine-shim", args, cfg.RegisterFlags, func(srv *servicekit.Server) (servicekit.Service, error) {
		return New(cfg, srv)
	})
}
