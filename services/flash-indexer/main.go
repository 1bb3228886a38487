package flashindexer

import (
	"context"

	"switchyard.dev/services/servicekit"
)

// Main runs the flash indexer as a process: flags (with SWITCHYARD_* environment
// variables), telemetry, server, until ctx is done. Both the flash-indexer binary
// and `switchyard serve flash-indexer` run it.
func Main(ctx context.Context, args []string) error {
	return servicekit.ServeConfig(ctx, "flash-indexer", args, DefaultConfig(), New)
}
