package enginesim

import (
	"time"

	"switchyard.dev/pkg/kv"
)

// nilBlock marks "no block" in links and tables.
const nilBlock int32 = -1

// blockPool is the device KV cache: NumGPUBlocks physical blocks in dense
// arrays, intrusive doubly linked free queues and a hash → block map of the
// cached (full, hashed) blocks, as in vLLM v1's BlockPool.
//
// A block is in exactly one of three states:
//   - in use: ref > 0, in no free queue (it may or may not be cached);
//   - free and cached: ref == 0, in a free queue, still findable by hash;
//   - free and empty: ref == 0, in a free queue, no hash.
//
// The free queues, taken in this order, are the eviction order (front):
//   - empty blocks, reused first because reusing them costs nothing;
//   - cached blocks, least recently used first: freed ones go to the tail
//     and requests free their blocks last-first, so a sequence's leaves are
//     evicted before its parents (vLLM's one queue is these two, empty
//     blocks at its head);
//   - retained blocks (a request's Retain: SGLang's retention_seconds,
//     vLLM's retention directives), least recently used first, evicted from
//     only when the others are empty. A retained block whose retention ran
//     out moves to the head of the cached queue when it reaches the head of
//     its own. Known defect (docs/results.md): that puts it ahead of cached
//     blocks idle for longer, where the engines evict by last use among the
//     unretained. One retention level: the engines' priority numbers are
//     not modelled.
type blockPool struct {
	// blk holds one block per entry plus the three queues' sentinels at
	// the end (empty, cached, retained). Array of structs: evicting or
	// naming a block touches one cache line, not one per field.
	blk     []blockMeta
	numFree int
	numUsed int // blocks with ref > 0
	byHash  hashIndex
}

type blockMeta struct {
	hash   kv.BlockHash // valid when cached
	parent kv.BlockHash // hash of the previous block in the sequence, 0 for a root
	// retainUntil is the engine time the block's retention runs out (0:
	// not retained). The 8-byte fields come first: the struct is 48 bytes,
	// not 56, and the pool is walked at random.
	retainUntil time.Duration
	ref         int32
	pos         int32 // block index within its sequence (root = 0)
	session     int32 // interned session of the request that computed it
	// Free queue links (block indices; the sentinels are the last three).
	prev, next int32
	cached     bool
	inFree     bool
}

// The free queues, by their sentinels' offsets from the end of blk.
const (
	queueEmpty = 3 - iota
	queueCached
	queueRetained
)

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		blk:    make([]blockMeta, n+3),
		byHash: newHashIndex(n),
	}
	for _, q := range []int{queueEmpty, queueCached, queueRetained} {
		s := p.sentinelOf(q)
		p.blk[s].prev, p.blk[s].next = s, s
	}
	for i := range int32(n) {
		p.pushBack(i)
	}
	return p
}

func (p *blockPool) size() int { return len(p.blk) - 3 }

// sentinelOf is the sentinel of free queue q.
func (p *blockPool) sentinelOf(q int) int32 { return int32(len(p.blk) - q) }

// queueOf is the free queue a freed block belongs in.
func (p *blockPool) queueOf(b int32) int {
	switch {
	case !p.blk[b].cached:
		return queueEmpty
	case p.blk[b].retainUntil > 0:
		return queueRetained
	}
	return queueCached
}

// pushBack appends b to the tail of its queue (most recently used).
func (p *blockPool) pushBack(b int32) {
	s := p.sentinelOf(p.queueOf(b))
	last := p.blk[s].prev
	p.blk[b].prev, p.blk[b].next = last, s
	p.blk[last].next = b
	p.blk[s].prev = b
	p.blk[b].inFree = true
	p.numFree++
}

// pushFront forgets whatever retention b had and puts it at the head of its
// queue, to be reused or evicted first.
func (p *blockPool) pushFront(b int32) {
	p.blk[b].retainUntil = 0
	s := p.sentinelOf(p.queueOf(b))
	first := p.blk[s].next
	p.blk[b].prev, p.blk[b].next = s, first
	p.blk[first].prev = b
	p.blk[s].next = b
	p.blk[b].inFree = true
	p.numFree++
}

func (p *blockPool) unlink(b int32) {
	p.blk[p.blk[b].prev].next = p.blk[b].next
	p.blk[p.blk[b].next].prev = p.blk[b].prev
	p.blk[b].inFree = false
	p.numFree--
}

// front is the next block to reuse or evict, or nilBlock. (Spelled out:
// it is on the allocation path.)
func (p *blockPool) front() int32 {
	s := int32(len(p.blk) - queueEmpty)
	if f := p.blk[s].next; f != s {
		return f
	}
	if s++; p.blk[s].next != s {
		return p.blk[s].next
	}
	if s++; p.blk[s].next != s {
		return p.blk[s].next
	}
	return nilBlock
}

// expire moves the retained blocks whose retention ran out by now, from
// the retained queue's head, to the head of the cached queue.
func (p *blockPool) expire(now time.Duration) {
	r := p.sentinelOf(queueRetained)
	if p.blk[r].next == r {
		return // nothing retained: the common case, kept cheap
	}
	for b := p.blk[r].next; b != r && p.blk[b].retainUntil <= now; b = p.blk[r].next {
		p.unlink(b)
		p.pushFront(b)
	}
}

// retain keeps a cached block ahead of unretained ones in the eviction
// order until the engine time until (a later retention wins).
func (p *blockPool) retain(b int32, until time.Duration) {
	if p.blk[b].cached && until > p.blk[b].retainUntil {
		p.blk[b].retainUntil = until
	}
}

// touch takes a reference on a block found by a prefix hit.
func (p *blockPool) touch(b int32) {
	if p.blk[b].ref == 0 {
		p.unlink(b)
		p.numUsed++
	}
	p.blk[b].ref++
}

// release drops a reference; the last one returns the block to its free
// queue (a retention that ran out by now is forgotten first).
func (p *blockPool) release(b int32, now time.Duration) {
	p.blk[b].ref--
	if p.blk[b].ref > 0 {
		return
	}
	p.numUsed--
	if !p.blk[b].cached {
		p.pushFront(b)
		return
	}
	if p.blk[b].retainUntil <= now {
		p.blk[b].retainUntil = 0
	}
	p.pushBack(b)
}

// lookup returns the cached block holding h, or nilBlock.
func (p *blockPool) lookup(h kv.BlockHash) int32 {
	b, _ := p.byHash.get(h)
	return b
}

// cache names block b with h. It reports false when another block already
// holds h (two requests computed the same block at once); b then stays
// anonymous, like vLLM's duplicate blocks.
func (p *blockPool) cache(b int32, h, parent kv.BlockHash, pos, session int32) bool {
	if !p.byHash.put(h, b) {
		return false
	}
	p.blk[b].hash, p.blk[b].parent, p.blk[b].pos, p.blk[b].session, p.blk[b].cached = h, parent, pos, session, true
	return true
}

// uncache forgets b's hash (eviction or demotion).
func (p *blockPool) uncache(b int32) {
	if !p.blk[b].cached {
		return
	}
	p.byHash.del(p.blk[b].hash)
	p.blk[b].cached = false
	p.blk[b].hash, p.blk[b].parent, p.blk[b].retainUntil = 0, 0, 0
}
