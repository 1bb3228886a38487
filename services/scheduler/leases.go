package scheduler

import "time"

// reapClock says when the lease reaper may expire leases. A reap that comes
// long after the one before means this process did not run meanwhile
// (stopped, frozen, starved): the shims' heartbeats of that time wait unread
// on its connections, or failed against it and are being retried, and every
// lease would lapse at once though every worker is alive — dropping each
// session's binding and each worker's cached blocks from the index with it.
// After such a stall the reaper waits grace, time for the heartbeats to
// arrive, before it expires any lease; a worker that did die meanwhile is
// dropped that much later.
type reapClock struct {
	interval, grace time.Duration
	last            time.Time // the previous reap (zero before the first)
	resumeAt        time.Time // no lease expires before it
}

func newReapClock(interval, grace time.Duration) *reapClock {
	return &reapClock{interval: interval, grace: grace}
}

// due reports whether leases may be expired at now, the wall-clock time of
// a reap, and how long the process had stalled when this reap found it so
// (0 otherwise).
func (c *reapClock) due(now time.Time) (bool, time.Duration) {
	var stalled time.Duration
	// A tick late by more than a whole interval and a second: a busy
	// process is late by milliseconds, not ticks.
	if !c.last.IsZero() {
		if gap := now.Sub(c.last); gap > 2*c.interval+time.Second {
			stalled = gap
			c.resumeAt = now.Add(c.grace)
		}
	}
	c.last = now
	return !now.Before(c.resumeAt), stalled
}
