package kvpoolservice

import (
	"context"

	"switchyard.dev/services/servicekit"
)

// Main runs the kv-pool service as a process: flags (with SWITCHYARD_*
// environment variables), telemetry, server, until ctx is done. Both the
// kv-pool binary and `switchyard serve kv-pool` run it.
func Main(ctx context.Context, args []string) error {
	return servicekit.ServeConfig(ctx, "kv-pool", args, DefaultConfig(), New)
}
