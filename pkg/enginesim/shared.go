package enginesim

import "switchyard.dev/pkg/kv"

// SharedPool is a KV store shared by several engines, below their own tiers
// (package kvpool's Store implements it; the offline simulator hands every
// engine the same one). The engine calls it from Step and ApplyHint only.
type SharedPool interface {
	// Put writes block h, just evicted from the engine's last local tier.
	// Writes are asynchronous in real engines (HiCache write-back), so the
	// engine charges them no time.
	Put(h kv.BlockHash)
	// Get reads the leading blocks of hs that the pool holds complete,
	// marking them recently used, and returns how many.
	Get(hs []kv.BlockHash) int
}

// poolRun is how many leading blocks of hs the shared pool can supply, of
// the run the engine does not hold itself (hs[0] it does not): a block the
// engine holds comes from its own tier, and the pool is not asked for it.
//
// The engine reads them while planning an admission, before it knows that
// the request fits; a request that then waits has refreshed the blocks it is
// about to need, which is harmless. They are charged transfer time only when
// the request is admitted.
func (e *Engine) poolRun(hs []kv.BlockHash) int {
	if e.shared == nil {
		return 0
	}
	j := 1
	for j < len(hs) && !e.holds(hs[j]) {
		j++
	}
	return e.shared.Get(hs[:j])
}

// holds reports whether the engine has block h on any of its own tiers.
func (e *Engine) holds(h kv.BlockHash) bool {
	return e.pool.lookup(h) != nilBlock || e.host.has(h) || e.disk.has(h)
}
