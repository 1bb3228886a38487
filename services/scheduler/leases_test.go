package scheduler

import (
	"testing"
	"time"
)

// A reap on time expires leases; one that finds the process stalled (its
// ticks missed for seconds) waits the grace first, then reaps as before.
func TestReapClockGivesGraceAfterAStall(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	c := newReapClock(time.Second, 5*time.Second)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i, tc := range []struct {
		at      time.Duration
		due     bool
		stalled time.Duration
	}{
		{0, true, 0},
		{time.Second, true, 0},
		{2*time.Second + 300*time.Millisecond, true, 0}, // late, not stalled
		{3 * time.Second, true, 0},
		{33 * time.Second, false, 30 * time.Second}, // SIGSTOP for 30 s
		{34 * time.Second, false, 0},
		{37 * time.Second, false, 0},
		{38 * time.Second, true, 0}, // the grace is over
		{39 * time.Second, true, 0},
	} {
		due, stalled := c.due(at(tc.at))
		if due != tc.due || stalled != tc.stalled {
			t.Errorf("reap %d at +%v: due %v, stalled %v; want %v, %v", i, tc.at, due, stalled, tc.due, tc.stalled)
		}
	}
}
