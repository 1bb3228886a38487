package servicekit

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff paces reconnections to a peer: the delay doubles from Min to Max,
// with ±25% jitter so that services restarted together do not hammer the peer
// in lockstep. The zero value is not usable; set Min and Max.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Reset starts the next Wait from Min again (after a connection succeeded).
func (b *Backoff) Reset() { b.cur = 0 }

// Next is the next delay, for callers that wait on more than a timer.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(b.cur*2, b.Max)
	}
	return time.Duration(float64(b.cur) * (0.75 + rand.Float64()/2))
}

// Wait sleeps the next delay; it returns false if ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
