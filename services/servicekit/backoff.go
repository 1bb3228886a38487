package servicekit

import (
	"context"
	"flag"
	"math/rand/v2"
	"time"
)

// Backoff paces reconnections to a peer: the delay doubles from Min to Max,
// with ±25% jitter so that services restarted together do not hammer the peer
// in lockstep. The zero value is not usable; set Min and Max, or start from
// DefaultBackoff. A service's Config holds one, and each loop that reconnects
// paces itself with a copy of its own.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// DefaultBackoff is how the mesh's services pace reconnections unless told
// otherwise: from 100 ms, doubling to 5 s.
func DefaultBackoff() Backoff { return Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second} }

// WithDefaults is b with a Min ≤ 0 taken from DefaultBackoff and a Max ≤ 0
// from it too (at least Min). A Max below Min bounds every delay: Min is
// lowered to it (--backoff-max 50ms asks for retries at least that often,
// and raising Max to the default instead made them 100 times rarer).
func (b Backoff) WithDefaults() Backoff {
	d := DefaultBackoff()
	if b.Min <= 0 {
		b.Min = d.Min
	}
	switch {
	case b.Max <= 0:
		b.Max = max(d.Max, b.Min)
	case b.Max < b.Min:
		b.Min = b.Max
	}
	return b
}

// RegisterFlags registers --backoff-min and --backoff-max with b's values as
// defaults; peer names what is reconnected to ("a peer", "the scheduler").
func (b *Backoff) RegisterFlags(fs *flag.FlagSet, peer string) {
	fs.DurationVar(&b.Min, "backoff-min", b.Min, "first reconnect delay to "+peer)
	fs.DurationVar(&b.Max, "backoff-max", b.Max, "longest reconnect delay to "+peer+" (a shorter one than --backoff-min lowers that too)")
	for _, name := range []string{"backoff-min", "backoff-max"} {
		Bound(fs, name, "> 0", func(v float64) bool { return v > 0 })
	}
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
