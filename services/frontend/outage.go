package frontend

import (
	"context"
	"sync/atomic"
)

// outage logs a peer that the admin view and the console ask every second
// (a scheduler replica, the hint emitter) once when it stops answering and
// once when it answers again, not at every call in between.
type outage struct{ failing atomic.Bool }

// failed reports a failed call: logged if the peer answered before.
func (o *outage) failed(ctx context.Context, log logger, what string, err error, attrs ...any) {
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
