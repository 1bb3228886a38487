package trace

import (
	"math"
	"math/rand/v2"
	"testing"
)

// firstFreeLane is the lane layout sessionLanes replaced, kept as the
// reference: a scan of every lane for the first one free at start.
type firstFreeLane struct{ end []float64 }

func (l *firstFreeLane) place(start, end float64) (int, float64) {
	for i, e := range l.end {
		if e <= start {
			prev := l.end[i]
			l.end[i] = end
			return i, prev
		}
	}
	l.end = append(l.end, end)
	return len(l.end) - 1, -1
}

// TestSessionLanesMatchFirstFreeLane: on random sessions (requests that
// start together, end together, last nothing, or never end: a NaN
// duration), the heaps give every request the lane, and the previous end,
// that the scan for the lowest-numbered free lane gave it, so an export
// draws today what it drew before.
func TestSessionLanesMatchFirstFreeLane(t *testing.T) {
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 1 + rng.IntN(200)
		spread := 1 + rng.IntN(50) // small: many equal starts and ends
		got, want := newSessionLanes(), &firstFreeLane{}
		start := float64(rng.IntN(10))
		for i := range n {
			start += float64(rng.IntN(spread)) * float64(rng.IntN(2))
			d := float64(rng.IntN(4 * spread))
			if rng.IntN(50) == 0 {
				d = math.NaN()
			}
			gl, ge := got.place(start, start+d)
			wl, we := want.place(start, start+d)
			if gl != wl || ge != we {
				t.Fatalf("seed %d request %d (start %v, duration %v): lane %d after %v, want lane %d after %v", seed, i, start, d, gl, ge, wl, we)
			}
		}
	}
}
