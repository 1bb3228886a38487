package hints

import "time"

// Bucket is a token bucket on an injected clock: Rate tokens per second up to
// Burst. The zero Rate means unlimited.
type Bucket struct {
	Rate, Burst float64
	tokens      float64
	last        time.Time
	started     bool
}

// NewBucket returns a full bucket.
func NewBucket(rate, burst float64) *Bucket {
	return &Bucket{Rate: rate, Burst: burst}
}

func (b *Bucket) refill(now time.Time) {
	if !b.started {
		b.tokens, b.last, b.started = b.Burst, now, true
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.Burst, b.tokens+dt*b.Rate)
		b.last = now
	}
}

// Available is how many tokens could be taken at now.
func (b *Bucket) Available(now time.Time) float64 {
	if b.Rate <= 0 {
		return b.Burst + 1e18
	}
	b.refill(now)
	return b.tokens
}

// Take removes n tokens if there are that many, and reports whether it did.
func (b *Bucket) Take(now time.Time, n float64) bool {
	if b.Rate <= 0 {
		return true
	}
	b.refill(now)
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}
