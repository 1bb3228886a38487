package sessionindexer

import (
	"context"

	"switchyard.dev/services/servicekit"
)

// Main runs the session-prefix indexer as a process: flags (with SWITCHYARD_* environment
// variables), telemetry, server, until ctx is done. Both the session-prefix-indexer binary
// and `switchyard serve session-prefix-indexer` run it.
func Main(ctx context.Context, args []string) error {
	return servicekit.ServeConfig(ctx, "session-prefix-indexer", args, DefaultConfig(), New)
}
