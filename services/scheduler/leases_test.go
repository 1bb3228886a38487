package scheduler

import (
	"testing"
	"time"
)

// A reap on time expires leases; one that finds the process stalled (its
// ticks missed for seconds) waits the grace first, then reaps as before.
func TestReapClockGivesGraceAfterAStall(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		interval, ttl time.Duration
		reaps         []reap
	}{
		{"defaults", time.Second, 10 * time.Second, []reap{
			{0, true, 0},
			{time.Second, true, 0},
			{2*time.Second + 300*time.Millisecond, true, 0}, // late, not stalled
			{3 * time.Second, true, 0},
			{33 * time.Second, false, 30 * time.Second}, // SIGSTOP for 30 s
			{34 * time.Second, false, 0},
			{37 * time.Second, false, 0},
			{38 * time.Second, true, 0}, // the grace (5 s) is over
			{39 * time.Second, true, 0},
		}},
		// A check interval of half a lease: a stop of 7 s right after a
		// tick (2 s late) would let a lease renewed 3.3 s before it lapse.
		// Any lateness past the floor is a stall here.
		{"a long check interval", 5 * time.Second, 10 * time.Second, []reap{
			{0, true, 0},
			{5 * time.Second, true, 0},
			{12 * time.Second, false, 7 * time.Second},
			{17 * time.Second, true, 0},
		}},
		// A short lease: a stall of 2.5 s outlasts it.
		{"a short lease", time.Second, 2 * time.Second, []reap{
			{0, true, 0},
			{time.Second, true, 0},
			{3500 * time.Millisecond, false, 2500 * time.Millisecond},
			{4 * time.Second, false, 0},
			{4500 * time.Millisecond, true, 0},
		}},
		// Late at every tick, for good: one grace per lease length, so
		// leases still expire between them.
		{"always late", time.Second, 10 * time.Second, []reap{
			{0, true, 0},
			{4 * time.Second, false, 4 * time.Second},
			{8 * time.Second, false, 0},
			{12 * time.Second, true, 0},
			{16 * time.Second, false, 4 * time.Second}, // a lease after the last grace began
		}},
	} {
		c := newReapClock(tc.interval, tc.ttl)
		for i, r := range tc.reaps {
			due, stalled := c.due(t0.Add(r.at))
			if due != r.due || stalled != r.stalled {
				t.Errorf("%s: reap %d at +%v: due %v, stalled %v; want %v, %v", tc.name, i, r.at, due, stalled, r.due, r.stalled)
			}
		}
	}
}

type reap struct {
	at      time.Duration
	due     bool
	stalled time.Duration
}
