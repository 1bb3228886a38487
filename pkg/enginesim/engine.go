package enginesim

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// Engine is one simulated inference engine. It is not safe for concurrent
// use: its driver serializes every call.
type Engine struct {
	cfg           Config
	bytesPerBlock float64

	pool   *blockPool
	host   *tierStore // nil when there is no host tier
	disk   *tierStore // nil when there is no disk tier
	shared SharedPool // nil when there is no shared pool

	reqs      []request
	freeSlots []int32
	byID      map[string]int32
	running   []int32 // admission order; preemption takes from the end
	waiting   []int32 // by priority, then FCFS; preempted requests go to the front of their priority

	sessions   []string // interned session ids; 0 is ""
	sessionIdx map[string]int32

	log eventLog

	// clock is the engine's own modelled time (speed-up not applied): the
	// sum of its step durations. Transfers are booked on it.
	clock time.Duration
	// linkFree is when each tier's link into the device is next idle: loads
	// over one link run one after another, and beside the steps.
	linkFree [kv.NumTiers]time.Duration
	// loads are the admitted requests still waiting for their KV to arrive
	// from a lower tier (request.loading), with the time it lands.
	loads []loadWait

	stats Stats

	done []int32 // requests finished in this step

	deferred     []deferredHint
	deferredFree int // free device blocks when the queue was last tried

	// Step scratch, reused across steps.
	batch    Batch
	sched    []scheduled
	outs     []Output
	hitPlan  []hit
	tokBuf   []uint32
	preempts []string

	// Cache changes of the batch passes, applied in order by flushPending
	// (see there). deferOps is set only while a pass records into pend.
	deferOps bool
	pend     []pendOp
	sink     int32 // keeps flushPending's touch loads alive
}

// pendOp is a deferred cache change: the eviction of device block b, or the
// naming of block b (position pos of a sequence) with hash h.
type pendOp struct {
	h, parent kv.BlockHash
	b         int32
	pos, sess int32
	evict     bool
}

type scheduled struct {
	slot   int32
	numNew int
}

type loadWait struct {
	slot    int32
	readyAt time.Duration
}

// hit is one block of a prefix hit: a device block, or a hash to load from a
// lower tier.
type hit struct {
	block int32 // device block, or nilBlock
	tier  kv.Tier
}

// Output is what one request produced in a step.
type Output struct {
	RequestID string
	// Token is the new output token: a request produces exactly one per
	// step in which all its tokens have been computed.
	Token uint32
	// First is set on a request's first output token; CachedTokens then
	// says how many prompt tokens came from cache (time to first token is
	// the sum of step durations since Add).
	First        bool
	CachedTokens int
	// Finish is set on the request's last output, with its Usage.
	Finish FinishReason
	Usage  *Usage
}

// StepResult is the outcome of one scheduler iteration. Outputs and
// Preempted are reused by the next Step: copy what you keep. Events are
// freshly allocated and may be kept.
type StepResult struct {
	// Duration is how long the step took in simulated time (speed-up
	// applied); 0 when nothing was scheduled and nothing is loading.
	Duration       time.Duration
	Outputs        []Output
	Events         []kv.Event
	Preempted      []string // requests that lost their blocks in this step
	PrefillTokens  int      // prompt (and re-prefill) tokens computed
	DecodeRequests int      // requests that decoded one token
}

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

// New builds an engine; zero Config fields take their defaults.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		sched:         make([]scheduled, 0, cfg.MaxNumSeqs),
		outs:          make([]Output, 0, cfg.MaxNumSeqs),
		cfg:           cfg,
		bytesPerBlock: float64(cfg.Model.BytesPerToken()) * float64(cfg.BlockSize),
		pool:          newBlockPool(cfg.NumGPUBlocks),
		byID:          make(map[string]int32),
		sessions:      []string{""},
		sessionIdx:    map[string]int32{"": 0},
		tokBuf:        make([]uint32, cfg.BlockSize),
		shared:        cfg.SharedPool,
	}
	if cfg.HostBlocks > 0 {
		e.host = newTierStore(kv.TierHost, cfg.HostBlocks)
	}
	if cfg.DiskBlocks > 0 {
		e.disk = newTierStore(kv.TierDisk, cfg.DiskBlocks)
	}
	return e, nil
}

// Config returns the effective configuration (defaults filled in).
func (e *Engine) Config() Config { return e.cfg }

// CapacityTokens is the device KV capacity in tokens.
func (e *Engine) CapacityTokens() int { return e.cfg.NumGPUBlocks * e.cfg.BlockSize }

// MaxSequenceTokens is the longest a request's prompt plus output may grow:
// the device KV capacity, or the model's MaxModelLen when that is shorter.
func (e *Engine) MaxSequenceTokens() int {
	if m := e.cfg.Model.MaxModelLen; m > 0 {
		return min(m, e.CapacityTokens())
	}
	return e.CapacityTokens()
}

func (e *Engine) internSession(s string) int32 {
	if i, ok := e.sessionIdx[s]; ok {
		return i
	}
	i := int32(len(e.sessions))
	e.sessions = append(e.sessions, s)
	e.sessionIdx[s] = i
	return i
}

// Add queues a request. It fails on a duplicate id, an empty prompt, block
// hashes that do not match the prompt, or a prompt that cannot fit the cache.
func (e *Engine) Add(r Request) error {
	bs := e.cfg.BlockSize
	switch {
	case r.ID == "":
		return invalid("empty request id")
	case len(r.Prompt) == 0:
		return invalid("request %q: empty prompt", r.ID)
	case r.MaxTokens < 0 || r.OutputLen < 0:
		return invalid("request %q: negative max tokens or output length", r.ID)
	case r.BlockHashes != nil && len(r.BlockHashes) != len(r.Prompt)/bs:
		return invalid("request %q: %d block hashes for %d full blocks", r.ID, len(r.BlockHashes), len(r.Prompt)/bs)
	}
	if _, dup := e.byID[r.ID]; dup {
		return ErrDuplicateID
	}
	limit := e.MaxSequenceTokens()
	// The prompt plus its first output token must fit the whole cache (or
	// the request would preempt itself forever) and the model's context.
	if len(r.Prompt)+1 > limit {
		return ErrPromptTooLong
	}
	maxTokens := limit - len(r.Prompt)
	if r.MaxTokens > 0 && r.MaxTokens < maxTokens {
		maxTokens = r.MaxTokens
	}
	seed := r.HashSeed
	if seed == 0 {
		seed = kvhash.BaseSeed
	}
	hashes := r.BlockHashes
	if hashes == nil {
		hashes = kvhash.Hasher{BlockSize: bs, Seed: seed}.Blocks(r.Prompt)
	}
	// Full slice expression: appending generated blocks must never write
	// into the caller's array.
	hashes = hashes[:len(hashes):len(hashes)]

	rng := uint64(e.cfg.Seed)*0x9e3779b97f4a7c15 ^ 0x5deece66d
	if r.Seed != 0 {
		rng ^= uint64(r.Seed) * 0xbf58476d1ce4e5b9
	} else {
		rng ^= xxh3.HashString(r.ID)
	}
	natural := r.OutputLen
	if natural == 0 {
		span := uint64(e.cfg.OutputLenMax - e.cfg.OutputLenMin + 1)
		natural = e.cfg.OutputLenMin + int(splitmix64(&rng)%span)
	}
	if r.IgnoreEOS {
		natural = 1 << 30 // never: only max_tokens (or the tool call) ends it
	}
	textLen := natural
	if len(r.ToolCall) > 0 {
		textLen = max(min(natural, maxTokens-len(r.ToolCall)), 0)
	}

	var slot int32
	if n := len(e.freeSlots); n > 0 {
		slot = e.freeSlots[n-1]
		e.freeSlots = e.freeSlots[:n-1]
	} else {
		slot = int32(len(e.reqs))
		e.reqs = append(e.reqs, request{})
	}
	q := &e.reqs[slot]
	// Size the output and the block table for the longest possible answer
	// (bounded, so a huge max_tokens does not reserve memory up front).
	outCap := min(maxTokens, textLen+len(r.ToolCall), 1<<14)
	blocks := q.blocks[:0]
	if want := ceilDiv(len(r.Prompt)+outCap, bs); cap(blocks) < want {
		blocks = make([]int32, 0, want)
	}
	*q = request{
		id:        r.ID,
		output:    make([]uint32, 0, outCap),
		blocks:    blocks,
		rng:       rng,
		promptLen: int32(len(r.Prompt)),
		textLen:   int32(min(textLen, math.MaxInt32)),
		maxTokens: int32(maxTokens),
		numTool:   int32(len(r.ToolCall)),
		state:     stateWaiting,
		hasStops:  len(r.StopTokenIDs) > 0,
		prompt:    r.Prompt,
		toolCall:  r.ToolCall,
		stops:     r.StopTokenIDs,
		hashes:    hashes,
		hashSeed:  seed,
		session:   e.internSession(r.SessionID),
		priority:  r.Priority,
	}
	e.byID[r.ID] = slot
	e.enqueue(slot, false)
	return nil
}

// enqueue puts a waiting request into the queue by priority (lower first).
// A new arrival goes behind every request of its priority; a preempted one
// (front) ahead of them, since it arrived before any of them still waits.
// With equal priorities this is plain FCFS with preempted requests first,
// and costs O(1) for arrivals.
func (e *Engine) enqueue(slot int32, front bool) {
	p := e.reqs[slot].priority
	var i int
	if front {
		for i < len(e.waiting) && e.reqs[e.waiting[i]].priority < p {
			i++
		}
	} else {
		i = len(e.waiting)
		for i > 0 && e.reqs[e.waiting[i-1]].priority > p {
			i--
		}
	}
	e.waiting = slices.Insert(e.waiting, i, slot)
}

// Abort drops a request at once (client disconnect) and frees its blocks;
// they stay cached. It reports whether the request was known.
func (e *Engine) Abort(id string) bool {
	slot, ok := e.byID[id]
	if !ok {
		return false
	}
	q := &e.reqs[slot]
	e.dropLoad(slot)
	switch q.state {
	case stateRunning:
		e.running = deleteSlot(e.running, slot)
	case stateWaiting:
		e.waiting = deleteSlot(e.waiting, slot)
	}
	e.freeBlocks(q)
	e.release(slot)
	e.stats.Aborted++
	return true
}

func deleteSlot(s []int32, slot int32) []int32 {
	if i := slices.Index(s, slot); i >= 0 {
		return slices.Delete(s, i, i+1)
	}
	return s
}

func (e *Engine) release(slot int32) {
	q := &e.reqs[slot]
	delete(e.byID, q.id)
	blocks := q.blocks[:0]
	*q = request{blocks: blocks}
	e.freeSlots = append(e.freeSlots, slot)
}

// HasWork reports whether Step would do anything.
func (e *Engine) HasWork() bool { return len(e.running) > 0 || len(e.waiting) > 0 }

// freeBlocks returns a request's blocks to the pool last-first, so that its
// leaves are evicted before its parents.
func (e *Engine) freeBlocks(q *request) {
	for i := len(q.blocks) - 1; i >= 0; i-- {
		e.pool.release(q.blocks[i])
	}
	q.blocks = q.blocks[:0]
}

// allocBlock takes the head of the free queue for a request, evicting its
// cached content if any. The caller has checked that a block is free.
func (e *Engine) allocBlock() int32 {
	b := e.pool.front()
	e.pool.unlink(b)
	// Touch the metadata of the block after the new head: the next
	// allocation unlinks that head and writes its successor, a random block
	// whose line is otherwise a cache miss on the critical path.
	p := e.pool
	e.sink += p.blk[p.blk[p.blk[p.sentinel()].next].next].ref
	if e.pool.blk[b].cached {
		if e.deferOps {
			// Its hash, parent and session stay in blk[b] until the flush.
			e.pend = append(e.pend, pendOp{b: b, evict: true})
		} else {
			e.evictDevice(b)
		}
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

func ceilDiv(a, b int) int { return (a + b - 1) / b }

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
func (e *Engine) Step() StepResult {
	bs := e.cfg.BlockSize
	budget := e.cfg.MaxNumBatchedTokens
	e.sched = e.sched[:0]
	e.outs = e.outs[:0]
	e.preempts = e.preempts[:0]
	b := &e.batch
	b.Prefill, b.DecodeRequests, b.DecodeContextTokens = b.Prefill[:0], 0, 0
	e.landLoads()

	// 1. Running requests, oldest first, each executed as soon as it is
	// scheduled (one pass over the batch). Nothing a request does here
	// changes what a later one can get: finished requests release their
	// blocks only at the end of the step, as in vLLM.
	e.deferOps = true
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
		self := false
		for need > e.pool.numFree {
			// Freeing the victim's blocks reads their cached state: apply
			// what this pass recorded first.
			e.flushPending()
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			if victim == slot {
				self = true
				break
			}
		}
		if self {
			break
		}
		for range need {
			q.blocks = append(q.blocks, e.allocBlock())
		}
		budget -= numNew
		e.execute(q, slot, numNew)
	}
	// Admission looks hashes up: the cache must be current.
	e.flushPending()
	e.deferOps = false

	// 2. Waiting requests in queue order (priority, then FCFS), unless this
	// step had to preempt.
	if len(e.preempts) == 0 {
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
	if len(e.waiting) == 0 {
		e.waiting = e.waiting[:0:0] // drop the consumed prefix of the array
	}
	// KV usage is that of the batch as scheduled.
	b.KVUsage = float64(e.pool.numUsed) / float64(e.pool.size())
	e.deferOps = true
	for _, s := range e.sched {
		e.execute(&e.reqs[s.slot], s.slot, s.numNew)
	}
	e.flushPending()
	e.deferOps = false

	// 3. Finished requests give back their blocks (still cached) and slots.
	if len(e.done) > 0 {
		for _, slot := range e.done {
			q := &e.reqs[slot]
			e.freeBlocks(q)
			delete(e.byID, q.id)
			blocks := q.blocks[:0]
			*q = request{blocks: blocks}
			e.freeSlots = append(e.freeSlots, slot)
		}
		e.done = e.done[:0]
		e.running = slices.DeleteFunc(e.running, func(slot int32) bool { return e.reqs[slot].state == stateFree })
	}

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

	// Device hits first, so allocating the rest can never evict them.
	for _, p := range plan {
		if p.block != nilBlock {
			e.pool.touch(p.block)
		}
	}
	var loaded [kv.NumTiers]int
	sess := e.sessions[q.session]
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
	var ready time.Duration
	for tier, n := range loaded {
		if n > 0 {
			e.stats.TierHitTokens[tier] += int64(n * bs)
			e.stats.LoadedBlocks += int64(n)
			ready = max(ready, e.book(kv.Tier(tier), n))
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

// flushPending applies the cache changes recorded by a batch pass over the
// scheduled requests, in the order they were recorded, so the cache, the
// events and the statistics are exactly those of applying each at once.
//
// Deferring them is what makes a decode step cheap: each change probes the
// hash index at a random slot (a cache miss), and in the pass every probe
// sat behind a request's worth of dependent work, so the misses were taken
// one at a time. Here a first loop touches every slot the changes will
// probe, with no dependency between iterations, so the processor overlaps
// the misses; the second loop then finds the slots in cache.
//
// Nothing in a pass reads what is deferred: allocation takes blocks off the
// free queue (never one with a pending change), naming is looked up only by
// admission (after the flush), and a preemption, which frees blocks by their
// cached state, flushes first.
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

// nameFullBlocks caches every block of q that became full and computed,
// emitting Stored for the ones that are new to the device.
func (e *Engine) nameFullBlocks(q *request) {
	full := q.numComputed / e.cfg.BlockSize
	sess := e.sessions[q.session]
	for b := int(q.numNamed); b < full; b++ {
		h := e.blockHash(q, b)
		var parent kv.BlockHash
		if b > 0 {
			parent = q.hashes[b-1]
		}
		if e.deferOps {
			e.pend = append(e.pend, pendOp{h: h, parent: parent, b: q.blocks[b], pos: int32(b), sess: q.session})
			continue
		}
		if e.pool.cache(q.blocks[b], h, parent, int32(b), q.session) {
			e.log.stored(kv.TierDevice, parent, h, sess)
		}
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

// sample appends the next output token of q and reports whether q finished
// (its blocks and slot are released at the end of the step).
func (e *Engine) sample(q *request, slot int32) bool {
	k := len(q.output)
	textLen := int(q.textLen)
	var tok uint32
	if k < textLen {
		v := e.cfg.Vocab
		// Multiply-shift instead of modulo: uniform enough, and a division
		// per token shows in the decode benchmark.
		tok = v[(splitmix64(&q.rng)>>32)*uint64(len(v))>>32]
	} else {
		tok = q.toolCall[k-textLen]
	}
	q.output = append(q.output, tok)
	var out *Output
	if n := len(e.outs); n < cap(e.outs) {
		e.outs = e.outs[:n+1]
		out = &e.outs[n]
		out.RequestID, out.Token, out.First, out.CachedTokens, out.Finish, out.Usage = q.id, tok, false, 0, FinishNone, nil
	} else {
		e.outs = append(e.outs, Output{RequestID: q.id, Token: tok})
		out = &e.outs[n]
	}
	if k == 0 {
		out.First = true
		out.CachedTokens = q.cachedTokens
	}
	switch {
	case k < textLen && q.isStop(tok):
		out.Finish = FinishStop
	case q.numTool > 0 && k == textLen+int(q.numTool)-1:
		out.Finish = FinishToolCalls
	case q.numTool == 0 && k == textLen-1:
		out.Finish = FinishStop
	case k+1 >= int(q.maxTokens):
		out.Finish = FinishLength
	}
	if out.Finish == FinishNone {
		return false
	}
	out.Usage = &Usage{
		PromptTokens:     len(q.prompt),
		CompletionTokens: len(q.output),
		CachedTokens:     q.cachedTokens,
		CachedByTier:     cachedByTier(q.cachedByTier),
	}
	q.state = stateDone
	e.done = append(e.done, slot)
	e.stats.Finished++
	return true
}

// execute computes a scheduled request's tokens: it names the blocks that
// filled up and samples a token once every token of the request is computed.
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

// Reset drops every cached block on every tier and returns the Cleared
// event. Like vLLM's reset_prefix_cache it refuses while requests are in
// flight (ErrBusy), since their blocks cannot be forgotten under them.
func (e *Engine) Reset() ([]kv.Event, error) {
	if e.HasWork() {
		return nil, ErrBusy
	}
	e.pool = newBlockPool(e.cfg.NumGPUBlocks)
	for _, t := range []*tierStore{e.host, e.disk} {
		if t != nil {
			t.clear()
		}
	}
	e.deferred = e.deferred[:0]
	e.log.cleared()
	return e.log.take(), nil
}

// Snapshot returns Stored events that describe the whole cache, tier by
// tier: applying them to an empty index yields the engine's current
// contents (for a subscriber resynchronizing). Each tier is walked depth
// first from its roots, so parents come before children and every chain
// becomes one event.
func (e *Engine) Snapshot() []kv.Event {
	var l eventLog
	p := e.pool
	dev := make([]snapEntry, 0, p.byHash.len())
	p.byHash.each(func(_ kv.BlockHash, b int32) {
		m := &p.blk[b]
		dev = append(dev, snapEntry{m.hash, m.parent, m.session})
	})
	e.snapshotTier(&l, kv.TierDevice, dev)
	for _, t := range []*tierStore{e.host, e.disk} {
		if t == nil {
			continue
		}
		es := make([]snapEntry, 0, t.resident())
		t.bySlot.each(func(_ kv.BlockHash, i int32) {
			es = append(es, snapEntry{t.hash[i], t.parent[i], t.session[i]})
		})
		e.snapshotTier(&l, t.tier, es)
	}
	return l.take() // capacity clipped: the rest of the chunk stays unshared
}

type snapEntry struct {
	h, parent kv.BlockHash
	sess      int32
}

func (e *Engine) snapshotTier(l *eventLog, t kv.Tier, es []snapEntry) {
	// Sorted by (parent, hash): each block's children form one run, and the
	// order is deterministic.
	slices.SortFunc(es, func(a, b snapEntry) int {
		if c := cmp.Compare(a.parent, b.parent); c != 0 {
			return c
		}
		return cmp.Compare(a.h, b.h)
	})
	present := make(map[kv.BlockHash]bool, len(es))
	for _, x := range es {
		present[x.h] = true
	}
	children := func(h kv.BlockHash) []snapEntry {
		i, _ := slices.BinarySearchFunc(es, h, func(x snapEntry, h kv.BlockHash) int { return cmp.Compare(x.parent, h) })
		j := i
		for j < len(es) && es[j].parent == h {
			j++
		}
		return es[i:j]
	}
	var stack []snapEntry
	for _, root := range es {
		if root.parent != 0 && present[root.parent] {
			continue // reached from its parent
		}
		stack = append(stack[:0], root)
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			l.stored(t, x.parent, x.h, e.sessions[x.sess])
			kids := children(x.h)
			for i := len(kids) - 1; i >= 0; i-- { // first child next: it extends this event
				stack = append(stack, kids[i])
			}
		}
	}
}

func cachedByTier(v [kv.NumTiers]int32) (out [kv.NumTiers]int) {
	for i, n := range v {
		out[i] = int(n)
	}
	return out
}
