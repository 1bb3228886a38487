package sessionindexer

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff doubles a delay from min to max with ±25% jitter, so peers that
// restart together are not hammered in lockstep.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) reset() { b.cur = 0 }

// wait sleeps the next delay; false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	d := time.Duration(float64(b.cur) * (0.75 + rand.Float64()/2))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
