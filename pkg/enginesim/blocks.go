package enginesim

import (
	"time"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// freeBlocks returns a request's blocks to the pool last-first, so that its
// leaves are evicted before its parents; a retained request's cached blocks
// are retained from now on for its Retain.
func (e *Engine) freeBlocks(q *request) {
	now := msOf(e.clock)
	until := msOf(e.clock + time.Duration(q.retainMs)*time.Millisecond) // saturates, as now does
	for i := len(q.blocks) - 1; i >= 0; i-- {
		if q.retainMs > 0 {
			e.pool.retain(q.blocks[i], until)
		}
		e.pool.release(q.blocks[i], now)
	}
	q.blocks = q.blocks[:0]
}

// allocBlock takes the head of the free queue for a request, evicting its
// cached content if any. The caller has checked that a block is free.
func (e *Engine) allocBlock() int32 {
	now := msOf(e.clock)
	b := e.pool.front(now)
	e.pool.unlink(b)
	// Touch the metadata of the block after the new head: the next
	// allocation unlinks that head and writes its successor, a random block
	// whose line is otherwise a cache miss on the critical path.
	p := e.pool
	if f := p.front(now); f != nilBlock {
		e.sink += p.blk[p.blk[f].next].ref
	}
	if e.pool.blk[b].cached {
		e.evictReused(b)
	}
	e.pool.blk[b].ref = 1
	e.pool.numUsed++
	return b
}

// evictDevice drops a free cached block from the device, demoting its
// content to the next tier down when there is one.
//
// A demotion copies the block down before its device block is reused, so the
// block is never absent from both tiers, and the events say so in that order:
// Stored on the lower tier, then Removed on the device. The other order would
// also make a subscriber's index see, for an instant, a hole in every chain
// through the block on the cumulative tier levels, and un-root and re-root
// the block's whole subtree below it for nothing.
func (e *Engine) evictDevice(b int32) {
	p := e.pool
	h, parent, pos, sess := p.blk[b].hash, p.blk[b].parent, p.blk[b].pos, p.blk[b].session
	p.uncache(b)
	e.stats.Evictions[kv.TierDevice]++
	e.demote(e.lowerThan(kv.TierDevice), h, parent, pos, sess)
	e.log.removed(kv.TierDevice, h)
}

// lowerThan is the next configured tier below t, or nil.
func (e *Engine) lowerThan(t kv.Tier) *tierStore {
	if t == kv.TierDevice && e.host != nil {
		return e.host
	}
	if t <= kv.TierHost && e.disk != nil {
		return e.disk
	}
	return nil
}

// demote stores a block on tier s, evicting the tier's least recently used
// block, which cascades further down (the victim is Stored below before it is
// Removed here, as in evictDevice). Below the last local tier (s nil) the
// block goes to the shared pool, if any.
func (e *Engine) demote(s *tierStore, h, parent kv.BlockHash, pos, sess int32) {
	if s == nil {
		if e.shared != nil {
			e.shared.Put(h)
			e.stats.PoolWrites++
		}
		return
	}
	if s.touch(h) {
		return
	}
	if s.full() {
		i := s.lru()
		vh, vp, vpos, vs := s.hash[i], s.parent[i], s.pos[i], s.session[i]
		s.remove(vh)
		e.stats.Evictions[s.tier]++
		e.demote(e.lowerThan(s.tier), vh, vp, vpos, vs)
		e.log.removed(s.tier, vh)
	}
	s.insert(h, parent, pos, sess)
	e.log.stored(s.tier, parent, h, e.sessions[sess])
}

func (e *Engine) tierStore(t kv.Tier) *tierStore {
	switch t {
	case kv.TierHost:
		return e.host
	case kv.TierDisk:
		return e.disk
	}
	return nil
}

// nameFullBlocks names every block of q that became full and computed. The
// names take effect, and the blocks new to the device are Stored, when the
// pass that computed them applies its changes (pending.go).
func (e *Engine) nameFullBlocks(q *request) {
	full := q.numComputed / e.cfg.BlockSize
	for b := int(q.numNamed); b < full; b++ {
		h := e.blockHash(q, b)
		var parent kv.BlockHash
		if b > 0 {
			parent = q.hashes[b-1]
		}
		e.deferNaming(q.blocks[b], h, parent, int32(b), q.session)
	}
	q.numNamed = int32(full)
}

// blockHash returns the sequence hash of block b of q, hashing blocks of
// generated tokens the first time they fill.
func (e *Engine) blockHash(q *request, b int) kv.BlockHash {
	if b < len(q.hashes) {
		return q.hashes[b]
	}
	bs := e.cfg.BlockSize
	lo, hi := b*bs, (b+1)*bs
	var buf []uint32
	if lo >= len(q.prompt) {
		// All generated tokens (every block of a long decode): hash them
		// in place.
		buf = q.output[lo-len(q.prompt) : hi-len(q.prompt)]
	} else {
		buf = e.tokBuf[:bs]
		n := copy(buf, q.prompt[lo:min(hi, len(q.prompt))])
		if n < bs { // the rest is generated tokens (a block past the prompt's full blocks)
			copy(buf[n:], q.output[lo+n-len(q.prompt):hi-len(q.prompt)])
		}
	}
	local := kvhash.LocalHash(buf, q.hashSeed)
	var h kv.BlockHash
	if b == 0 {
		h = kvhash.Root(local)
	} else {
		h = kvhash.Chain(q.hashes[b-1], local)
	}
	q.hashes = append(q.hashes, h)
	return h
}
