package servicekit

import (
	"context"

	"google.golang.org/grpc"
)

// Watch keeps a server stream from a peer open until ctx ends: open starts
// a stream, every message goes to handle (false stops watching for good),
// and when the stream ends or cannot be opened Watch waits on its own copy
// of bo and opens it again; a message resets that copy. ended, when not nil,
// hears why each stream ended or failed to open (never ctx's own end). The
// watchers of the scheduler's streams share this loop; what differs is open
// and handle.
func Watch[T any](ctx context.Context, bo Backoff, open func(context.Context) (grpc.ServerStreamingClient[T], error),
	handle func(*T) bool, ended func(error)) {
	for ctx.Err() == nil {
		stream, err := open(ctx)
		for err == nil {
			var msg *T
			if msg, err = stream.Recv(); err == nil {
				bo.Reset()
				if !handle(msg) {
					return
				}
			}
		}
		if ended != nil && ctx.Err() == nil {
			ended(err)
		}
		if !bo.Wait(ctx) {
			return
		}
	}
}
