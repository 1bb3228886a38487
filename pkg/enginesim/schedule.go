package enginesim

import (
	"slices"
	"time"

	"switchyard.dev/pkg/kv"
)

// scheduled is a request admitted in this step and the tokens it computes.
type scheduled struct {
	slot   int32
	numNew int
}

// hit is one block of a prefix hit: a device block, or a hash to load from a
// lower tier.
type hit struct {
	block int32 // device block, or nilBlock
	tier  kv.Tier
}

// Step runs one scheduler iteration: it schedules running requests first
// (preempting the newest when blocks run out), then admits waiting ones while
// the token budget, max_num_seqs and free blocks allow, computes the
// scheduled tokens, samples one token for every request whose tokens are all
// computed, and frees finished requests.
//
// A request whose prefix hit is partly on a lower tier holds its blocks
// from admission and joins the batch once its KV has arrived: loads run on
// each tier's link beside the steps (as vLLM's KV connectors and SGLang's
// HiCache load asynchronously), so they delay that request only. A step in
// which every runnable request is still loading lasts until the first load
// lands, and computes nothing.
//
// Both passes that execute requests defer their cache changes (pending.go).
func (e *Engine) Step() StepResult {
	budget := e.cfg.MaxNumBatchedTokens
	e.sched = e.sched[:0]
	e.outs = e.outs[:0]
	e.preempts = e.preempts[:0]
	b := &e.batch
	b.Prefill, b.DecodeRequests, b.DecodeContextTokens = b.Prefill[:0], 0, 0
	e.landLoads()

	// 1. Running requests, executed as they are scheduled.
	e.beginPass()
	budget = e.scheduleRunning(budget)
	e.endPass()

	// 2. Waiting requests, unless this step had to preempt, executed once
	// all are admitted.
	if len(e.preempts) == 0 {
		e.admitWaiting(budget)
	}
	if len(e.waiting) == 0 {
		e.waiting = e.waiting[:0:0] // drop the consumed prefix of the array
	}
	// KV usage is that of the batch as scheduled.
	b.KVUsage = float64(e.pool.numUsed) / float64(e.pool.size())
	e.beginPass()
	for _, s := range e.sched {
		e.execute(&e.reqs[s.slot], s.slot, s.numNew)
	}
	e.endPass()

	// 3. Finished requests give back their blocks (still cached) and slots.
	e.releaseFinished()

	e.retryDeferred()
	newTokens := b.NewTokens()
	var d time.Duration
	switch {
	case newTokens > 0 || b.DecodeRequests > 0:
		d = e.cfg.Perf.StepTime(b)
		e.stats.BusyTime += e.cfg.scale(d)
	case len(e.loads) > 0:
		d = e.nextLanding() - e.clock // the GPU idles until a load lands
	}
	e.clock = saturatingAdd(e.clock, d)
	d = e.cfg.scale(d)
	e.stats.Steps++
	e.stats.PromptTokens += int64(newTokens)
	e.stats.GeneratedTokens += int64(len(e.outs))
	return StepResult{
		Duration:       d,
		Outputs:        e.outs,
		Events:         e.log.take(),
		Preempted:      e.preempts,
		PrefillTokens:  newTokens,
		DecodeRequests: b.DecodeRequests,
	}
}

// scheduleRunning schedules the running requests, oldest first, and executes
// each as soon as it is scheduled (one pass over the batch). It returns the
// token budget left. Nothing a request does here changes what a later one
// can get: finished requests release their blocks only at the end of the
// step, as in vLLM. A request that needs more blocks than are free preempts
// the newest running ones, itself last; preempting itself ends the pass.
func (e *Engine) scheduleRunning(budget int) int {
	bs := e.cfg.BlockSize
	for i := 0; i < len(e.running) && budget > 0; i++ {
		slot := e.running[i]
		q := &e.reqs[slot]
		if q.loading {
			continue
		}
		numNew := min(q.numTokens()-q.numComputed, budget)
		need := 0
		if end := q.numComputed + numNew; end > len(q.blocks)*bs {
			need = ceilDiv(end, bs) - len(q.blocks)
		}
		for need > e.pool.numFree {
			// Freeing the victim's blocks reads their cached state: apply
			// what this pass recorded first.
			e.flushPending()
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			if victim == slot {
				return budget
			}
		}
		for range need {
			q.blocks = append(q.blocks, e.allocBlock())
		}
		budget -= numNew
		e.execute(q, slot, numNew)
	}
	return budget
}

// preempt takes all blocks from a running request (recompute preemption);
// it goes back to the front of its priority in the waiting queue and
// re-prefills later.
func (e *Engine) preempt(slot int32) {
	q := &e.reqs[slot]
	e.dropLoad(slot)
	// Everything computed so far is lost unless a later admission finds it
	// cached (recompute counts what is computed again).
	q.recompute = int32(q.numComputed)
	e.freeBlocks(q)
	q.numComputed, q.numNamed = 0, 0
	q.decoding = false
	q.state = stateWaiting
	e.enqueue(slot, true)
	e.stats.Preemptions++
	e.preempts = append(e.preempts, q.id)
}

// admitWaiting admits waiting requests in queue order (priority, then FCFS)
// while max_num_seqs, the token budget and the free blocks allow, and lists
// in e.sched those to execute in this step (not those still loading).
// Admission looks hashes up, so no pass may be open (pending.go).
func (e *Engine) admitWaiting(budget int) {
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		slot := e.waiting[0]
		q := &e.reqs[slot]
		if !e.admit(slot, q, budget) {
			break
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, slot)
		q.state = stateRunning
		if q.loading {
			continue // joins a later step, when its KV has arrived
		}
		numNew := min(q.numTokens()-q.numComputed, budget)
		e.sched = append(e.sched, scheduled{slot: slot, numNew: numNew})
		budget -= numNew
	}
}

// admit tries to schedule a waiting request: it finds the longest cached
// prefix over every tier, checks that the blocks it needs are free, then
// takes the device hits, starts loading the lower-tier hits (the request is
// loading until they land) and allocates the rest.
func (e *Engine) admit(slot int32, q *request, budget int) bool {
	bs := e.cfg.BlockSize
	numTokens := q.numTokens()
	// At least one token must be computed to produce logits, so a fully
	// cached prompt still recomputes its last block (as vLLM does).
	maxHit := min((numTokens-1)/bs, len(q.hashes))
	plan := e.hitPlan[:0]
	evictable, onDevice := 0, 0
	for i := 0; i < maxHit; i++ {
		h := q.hashes[i]
		if b := e.pool.lookup(h); b != nilBlock {
			plan = append(plan, hit{block: b, tier: kv.TierDevice})
			onDevice++
			if e.pool.blk[b].ref == 0 {
				evictable++
			}
			continue
		}
		if e.host.has(h) {
			plan = append(plan, hit{block: nilBlock, tier: kv.TierHost})
		} else if e.disk.has(h) {
			plan = append(plan, hit{block: nilBlock, tier: kv.TierDisk})
		} else if n := e.poolRun(q.hashes[i:maxHit]); n > 0 {
			for range n {
				plan = append(plan, hit{block: nilBlock, tier: kv.TierShared})
			}
			i += n - 1
		} else {
			break
		}
	}
	e.hitPlan = plan
	computed := len(plan) * bs
	numNew := min(numTokens-computed, budget)
	newBlocks := ceilDiv(computed+numNew, bs) - onDevice
	if newBlocks+evictable > e.pool.numFree {
		return false
	}

	// Device hits first, so allocating the rest can never evict them. A
	// hit still being copied in (a prefetch, or another request's load)
	// is there when its copy lands.
	var ready time.Duration
	for _, p := range plan {
		if p.block != nilBlock {
			e.pool.touch(p.block)
			ready = max(ready, e.pool.blk[p.block].landsAt)
		}
	}
	var loaded [kv.NumTiers]int
	sess := e.sessions[q.session]
	first := len(q.blocks)
	for i, p := range plan {
		if p.block != nilBlock {
			q.blocks = append(q.blocks, p.block)
			continue
		}
		h := q.hashes[i]
		var parent kv.BlockHash
		if i > 0 {
			parent = q.hashes[i-1]
		}
		if s := e.tierStore(p.tier); s != nil {
			s.touch(h)
		}
		b := e.allocBlock()
		// The hash cannot be on the device: the lookup above missed it and
		// nothing since has named a block.
		e.pool.cache(b, h, parent, int32(i), q.session)
		e.log.stored(kv.TierDevice, parent, h, sess)
		q.blocks = append(q.blocks, b)
		loaded[p.tier]++
	}
	for len(q.blocks) < ceilDiv(computed+numNew, bs) {
		q.blocks = append(q.blocks, e.allocBlock())
	}
	q.numComputed = computed
	q.numNamed = int32(len(plan))
	q.decoding = false

	e.stats.PrefixQueryTokens += int64(numTokens)
	e.stats.PrefixHitTokens += int64(computed)
	e.stats.TierHitTokens[kv.TierDevice] += int64(onDevice * bs)
	var lands [kv.NumTiers]time.Duration
	for tier, n := range loaded {
		if n > 0 {
			e.stats.TierHitTokens[tier] += int64(n * bs)
			e.stats.LoadedBlocks += int64(n)
			lands[tier] = e.book(kv.Tier(tier), n)
			ready = max(ready, lands[tier])
		}
	}
	if len(plan) > onDevice { // some blocks are copied in
		for i, p := range plan {
			if p.block == nilBlock {
				e.pool.blk[q.blocks[first+i]].landsAt = lands[p.tier]
			}
		}
	}
	if ready > e.clock {
		q.loading = true
		e.loads = append(e.loads, loadWait{slot: slot, readyAt: ready})
	}
	// Of what a preemption threw away, the hit brought back this much: the
	// rest is computed again.
	q.recompute = int32(max(int(q.recompute)-computed, 0))
	if !q.admitted {
		q.admitted = true
		q.cachedTokens = computed
		q.cachedByTier[kv.TierDevice] = int32(onDevice * bs)
		for tier, n := range loaded {
			q.cachedByTier[tier] += int32(n * bs)
		}
	}
	return true
}

// execute computes a scheduled request's tokens: it names the blocks that
// filled up and samples a token once every token of the request is computed.
// It runs only inside a pass (pending.go).
func (e *Engine) execute(q *request, slot int32, numNew int) {
	b := &e.batch
	if q.decoding {
		b.DecodeRequests++
		b.DecodeContextTokens += q.numComputed + 1
	} else {
		b.Prefill = append(b.Prefill, PrefillChunk{NewTokens: numNew, PrefixTokens: q.numComputed})
		if q.recompute > 0 {
			n := min(int32(numNew), q.recompute)
			e.stats.RePrefilledTokens += int64(n)
			q.recompute -= n
		}
	}
	q.numComputed += numNew
	if q.numComputed >= int(q.numNamed+1)*e.cfg.BlockSize {
		e.nameFullBlocks(q) // a block filled up: name it
	}
	if q.numComputed < q.numTokens() {
		return // a prefill chunk: no token yet
	}
	q.decoding = true
	e.sample(q, slot)
}

// releaseFinished frees the blocks and slots of the requests that finished
// in this step and takes them out of the running list.
func (e *Engine) releaseFinished() {
	if len(e.done) == 0 {
		return
	}
	for _, slot := range e.done {
		e.freeBlocks(&e.reqs[slot])
		e.release(slot)
	}
	e.done = e.done[:0]
	e.running = slices.DeleteFunc(e.running, func(slot int32) bool { return e.reqs[slot].state == stateFree })
}
