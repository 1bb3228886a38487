package kvhintemitter

import (
	"context"

	"switchyard.dev/services/servicekit"
)

// Main runs the KV hint emitter as a process: flags (with SWITCHYARD_* environment
// variables), telemetry, server, until ctx is done. Both the kvhint-emitter binary
// and `switchyard serve kvhint-emitter` run it.
func Main(ctx context.Context, args []string) error {
	return servicekit.ServeConfig(ctx, "kvhint-emitter", args, DefaultConfig(), New)
}
