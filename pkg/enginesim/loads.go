package enginesim

import (
	"math"
	"slices"
	"time"

	"switchyard.dev/pkg/kv"
)

// loadWait is an admitted request whose prefix is still being copied in from
// a lower tier, and when the last of it lands (modelled time).
type loadWait struct {
	slot    int32
	readyAt time.Duration
}

// transferTime is the time to copy n blocks from tier t into the device.
func (e *Engine) transferTime(t kv.Tier, n int) time.Duration {
	if n == 0 {
		return 0
	}
	bw := e.cfg.TransferBandwidth
	switch t {
	case kv.TierDisk:
		bw = e.cfg.DiskTransferBandwidth
	case kv.TierShared:
		bw = e.cfg.PoolTransferBandwidth
	}
	return time.Duration(float64(n) * e.bytesPerBlock / (bw * float64(max(e.cfg.TensorParallelSize, 1))) * float64(time.Second))
}

// book reserves tier t's link for copying n blocks into the device, after
// whatever it is already copying, and returns when the copy lands (modelled
// time).
func (e *Engine) book(t kv.Tier, n int) time.Duration {
	start := max(e.clock, e.linkFree[t])
	e.linkFree[t] = saturatingAdd(start, e.transferTime(t, n))
	return e.linkFree[t]
}

// landLoads lets the requests whose KV has arrived join the batch.
func (e *Engine) landLoads() {
	if len(e.loads) == 0 {
		return
	}
	e.loads = slices.DeleteFunc(e.loads, func(l loadWait) bool {
		if l.readyAt > e.clock {
			return false
		}
		e.reqs[l.slot].loading = false
		return true
	})
}

func (e *Engine) nextLanding() time.Duration {
	next := time.Duration(math.MaxInt64)
	for _, l := range e.loads {
		next = min(next, l.readyAt)
	}
	return next
}

// dropLoad forgets a request's pending load (preempted or aborted while
// loading); the link time it booked stays spent.
func (e *Engine) dropLoad(slot int32) {
	if !e.reqs[slot].loading {
		return
	}
	e.reqs[slot].loading = false
	e.loads = slices.DeleteFunc(e.loads, func(l loadWait) bool { return l.slot == slot })
}

// Advance tells the engine that d of simulated time (speed-up applied, as
// StepResult.Duration) passed without a step, while it was idle: its clock
// moves only with steps, and the copies it books next must start now, not
// when it last stepped. A driver calls it before the first Step or
// ApplyHint after an idle spell.
func (e *Engine) Advance(d time.Duration) {
	if d > 0 {
		e.clock = saturatingAdd(e.clock, time.Duration(float64(d)*e.cfg.SpeedUp))
	}
}
