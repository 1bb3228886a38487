package enginesim

import "switchyard.dev/pkg/kv"

// Deferred cache changes: the one place where the cache can lag behind what
// the engine has done, and the rule that keeps it exact: flush before any
// lookup.
//
// Step executes requests in two batch passes (the running requests, then
// the ones it admitted), each between beginPass and endPass. Inside a pass
// the two cache changes it can make are recorded in Engine.pend instead of
// applied: the eviction of the cached free block an allocation reuses
// (evictReused) and the naming of a block that filled up (deferNaming;
// blocks are named only by execute, which runs only in a pass). endPass
// applies them in the order they were recorded (flushPending), so the
// cache, the events and the statistics are exactly those of applying each
// at once.
//
// Deferring them is what makes a decode step cheap: each change probes the
// hash index at a random slot (a cache miss), and in the pass every probe
// sat behind a request's worth of dependent work, so the misses were taken
// one at a time. flushPending's first loop touches every slot the changes
// will probe, with no dependency between iterations, so the processor
// overlaps the misses; the second loop then finds the slots in cache.
//
// Nothing in a pass reads what is deferred: allocation takes blocks off the
// free queue (never one with a pending change: a block being named is in
// use, and one whose eviction is pending was just allocated), names are
// looked up only by admission, after the first pass ends, and a preemption,
// which frees blocks by their cached state, flushes first
// (scheduleRunning). Everything else that changes the cache (admission,
// hints, Abort, Reset) runs outside a pass and applies its changes at once.

// pendOp is a deferred cache change: the eviction of device block b, or the
// naming of block b (position pos of a sequence) with hash h.
type pendOp struct {
	h, parent kv.BlockHash
	b         int32
	pos, sess int32
	evict     bool
}

// beginPass starts recording cache changes instead of applying them.
func (e *Engine) beginPass() { e.deferOps = true }

// endPass applies what the pass recorded and stops recording.
func (e *Engine) endPass() {
	e.flushPending()
	e.deferOps = false
}

// evictReused evicts the cached content of device block b, which an
// allocation is reusing, or records the eviction inside a pass. b's hash,
// parent and session stay in its metadata until the flush.
func (e *Engine) evictReused(b int32) {
	if e.deferOps {
		e.pend = append(e.pend, pendOp{b: b, evict: true})
		return
	}
	e.evictDevice(b)
}

// deferNaming records that device block b, position pos of a sequence of
// session sess, is to be named h (a child of parent).
func (e *Engine) deferNaming(b int32, h, parent kv.BlockHash, pos, sess int32) {
	e.pend = append(e.pend, pendOp{h: h, parent: parent, b: b, pos: pos, sess: sess})
}

// flushPending applies the recorded cache changes in order; the pass, if
// one is open, goes on recording.
func (e *Engine) flushPending() {
	ops := e.pend
	if len(ops) == 0 {
		return
	}
	p := e.pool
	idx := &p.byHash
	sink := e.sink
	for i := range ops {
		h := ops[i].h
		if ops[i].evict {
			h = p.blk[ops[i].b].hash
		}
		sink += idx.touch(h)
	}
	e.sink = sink
	for i := range ops {
		op := &ops[i]
		if op.evict {
			e.evictDevice(op.b)
			continue
		}
		if p.cache(op.b, op.h, op.parent, op.pos, op.sess) {
			e.log.stored(kv.TierDevice, op.parent, op.h, e.sessions[op.sess])
		}
	}
	e.pend = ops[:0]
}
