package frontend

import (
	"context"
	"sync/atomic"
)

// outage logs a peer that the admin view and the console ask every second
// (a scheduler replica, the hint emitter) once when it stops answering and
// once when it answers again, not at every call in between.
type outage struct{ failing atomic.Bool }

// failed reports a failed call: logged if the peer answered before. A call
// that failed because ctx ended (the viewer or admin client that asked went
// away) says nothing of the peer: it is neither logged nor remembered, or
// every closed console tab would log each replica as down and back up.
func (o *outage) failed(ctx context.Context, log logger, what string, err error, attrs ...any) {
	if ctx.Err() != nil {
		return
	}
	if !o.failing.Swap(true) {
		log.WarnContext(ctx, what+" does not answer; shown without it meanwhile", append(attrs, "err", err)...)
	}
}

// answered reports a call that succeeded: logged if the peer had failed.
func (o *outage) answered(ctx context.Context, log logger, what string, attrs ...any) {
	if o.failing.Swap(false) {
		log.InfoContext(ctx, what+" answers again", attrs...)
	}
}
