package scheduler

import "time"

// reapClock says when the lease reaper may expire leases. A reap that comes
// well after its tick means this process did not run meanwhile (stopped,
// frozen, starved): the shims' heartbeats of that time wait unread on its
// connections, or failed against it and are being retried, and every lease
// would lapse at once though every worker is alive, dropping each session's
// binding and each worker's cached blocks from the index with it. After such
// a stall the reaper waits a grace of half a lease (a shim renews at a
// third), time for the heartbeats to arrive, before it expires any lease; a
// worker that did die meanwhile is dropped that much later.
type reapClock struct {
	interval, ttl time.Duration
	last          time.Time // the previous reap (zero before the first)
	resumeAt      time.Time // no lease expires before it
	graced        time.Time // when the last grace began
}

func newReapClock(interval, ttl time.Duration) *reapClock {
	return &reapClock{interval: interval, ttl: ttl}
}

// grace is how long leases wait after a stall.
func (c *reapClock) grace() time.Duration { return c.ttl / 2 }

// due reports whether leases may be expired at now, the wall-clock time of
// a reap, and how long the process had stalled when this reap found it so
// (0 otherwise). A reap is stalled when it comes later than its tick by more
// than an interval and a second (a busy process is late by milliseconds), or
// than what keeps the time since the previous reap within half a lease if
// that is less (but at least stallFloor): a stall of more than half a lease
// and the third a shim waits between heartbeats would outlast a lease
// renewed just before it. One grace is given per lease length at most, so
// that a loop late at every tick (a process starved for good) still expires
// leases.
func (c *reapClock) due(now time.Time) (bool, time.Duration) {
	var stalled time.Duration
	if !c.last.IsZero() {
		late := now.Sub(c.last) - c.interval
		if late > max(stallFloor, min(c.interval+time.Second, c.ttl/2-c.interval)) && (c.graced.IsZero() || now.Sub(c.graced) >= c.ttl) {
			stalled = now.Sub(c.last)
			c.resumeAt, c.graced = now.Add(c.grace()), now
		}
	}
	c.last = now
	return !now.Before(c.resumeAt), stalled
}

// stallFloor is the least lateness taken for a stall: a busy process's
// ticks come milliseconds late.
const stallFloor = 250 * time.Millisecond
