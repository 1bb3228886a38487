package enginesim

import (
	"time"

	"switchyard.dev/pkg/kv"
)

// TierStats is the occupancy of one tier, in blocks.
type TierStats struct {
	Total    int // capacity (0 when the tier is off)
	Used     int // device: blocks held by requests; lower tiers: resident
	Resident int // blocks named by a hash (findable by a prefix lookup)
	Occupied int // blocks holding any KV: in use or cached
}

// Stats are the engine's counters and gauges.
type Stats struct {
	Running, Waiting int
	Tiers            [kv.NumTiers]TierStats
	// KVUsage is the fraction of device blocks held by requests (vLLM's
	// kv_cache_usage_perc / 100; free cached blocks do not count).
	KVUsage float64

	PrefixQueryTokens    int64 // prompt tokens looked up at admission
	PrefixHitTokens      int64 // of which found in cache (any tier)
	TierHitTokens        [kv.NumTiers]int64
	Preemptions          int64
	RePrefilledTokens    int64 // tokens computed again after a preemption (those a later prefix hit brought back do not count)
	PromptTokens         int64 // prompt tokens computed (prefill work)
	GeneratedTokens      int64
	Steps                int64
	Finished             int64
	Aborted              int64
	Evictions            [kv.NumTiers]int64 // blocks dropped from each tier
	PoolWrites           int64              // blocks written to the shared pool
	LoadedBlocks         int64              // blocks copied into the device (tier hits, hints)
	DeferredHints        int                // hints queued for a retry
	DeferredHintsApplied int64              // queued hints that later went through
	BusyTime             time.Duration      // sum of the durations of steps that computed (not those that only waited for loads)
}

// Load is what a router reads of an engine on every request (the part of
// Stats that costs O(1)).
type Load struct {
	Running, Waiting int
	UsedBlocks       int     // device blocks held by requests
	KVUsage          float64 // UsedBlocks / device blocks
}

// Load returns the engine's current load.
func (e *Engine) Load() Load {
	return Load{Running: len(e.running), Waiting: len(e.waiting), UsedBlocks: e.pool.numUsed,
		KVUsage: float64(e.pool.numUsed) / float64(e.pool.size())}
}

// Stats returns the current counters and gauges. It walks the device
// blocks (Occupied): for the per-request figures use Load.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Running, s.Waiting = len(e.running), len(e.waiting)
	s.DeferredHints = len(e.deferred)
	idleCached := 0
	for _, m := range e.pool.blk[:e.pool.size()] {
		if m.cached && m.ref == 0 {
			idleCached++
		}
	}
	s.Tiers[kv.TierDevice] = TierStats{
		Total:    e.pool.size(),
		Used:     e.pool.numUsed,
		Resident: e.pool.byHash.len(),
		Occupied: e.pool.numUsed + idleCached,
	}
	for _, t := range []*tierStore{e.host, e.disk} {
		if t != nil {
			n := t.resident()
			s.Tiers[t.tier] = TierStats{Total: t.capacity(), Used: n, Resident: n, Occupied: n}
		}
	}
	s.KVUsage = float64(e.pool.numUsed) / float64(e.pool.size())
	return s
}
