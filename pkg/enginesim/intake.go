package enginesim

import (
	"math"
	"slices"

	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/kvhash"
)

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
	case r.Retain < 0:
		return invalid("request %q: negative retention", r.ID)
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
		retainMs:  int32(min(r.Retain.Milliseconds(), math.MaxInt32)),
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
	if !e.drop(id) {
		return false
	}
	e.stats.Aborted++
	return true
}

// Stop ends a request at once as finished (its caller found a stop sequence
// in its output, which the simulated model does not read): as Abort, its
// blocks are freed and stay cached, but it counts as finished. It reports
// whether the request was known.
func (e *Engine) Stop(id string) bool {
	if !e.drop(id) {
		return false
	}
	e.stats.Finished++
	return true
}

// drop takes a request out of the queues and frees its blocks.
func (e *Engine) drop(id string) bool {
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
	return true
}

func deleteSlot(s []int32, slot int32) []int32 {
	if i := slices.Index(s, slot); i >= 0 {
		return slices.Delete(s, i, i+1)
	}
	return s
}

// release forgets a finished or aborted request, whose blocks were freed,
// and returns its slot, keeping the block table's array for the next one.
func (e *Engine) release(slot int32) {
	q := &e.reqs[slot]
	delete(e.byID, q.id)
	blocks := q.blocks[:0]
	*q = request{blocks: blocks}
	e.freeSlots = append(e.freeSlots, slot)
}
