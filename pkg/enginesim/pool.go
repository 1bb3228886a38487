package enginesim

import (
	"math"
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
//     only when the others are empty, except that a retained block whose
//     retention ran out competes with the cached queue's head by last use:
//     the older of the two goes first, as the engines evict by last use
//     among the unretained. One retention level: the engines' priority
//     numbers are not modelled, and expiry is seen at the retained queue's
//     head only (retentions of one length expire in that queue's order).
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
	ref    int32
	pos    int32 // block index within its sequence (root = 0)
	// session is the interned session of the request that computed it.
	session int32
	// retainUntil is the engine time, in milliseconds, the block's
	// retention runs out (0: not retained); freedAt is when it was last
	// released (0 when put at a queue's head to go first). Milliseconds in
	// 32 bits (24 days of engine time) keep a block small: the pool is
	// walked at random.
	retainUntil, freedAt engineMs
	// Free queue links (block indices; the sentinels are the last three).
	prev, next int32
	cached     bool
	inFree     bool
	// landsAt is when the block's content, copied in from a lower tier or
	// another worker, is on the device (modelled time; 0 for one computed
	// here): a request that finds it earlier waits for the copy, as the one
	// that started it does.
	landsAt time.Duration
}

// engineMs is an engine time in whole milliseconds.
type engineMs int32

// msOf is d in engineMs, saturating: past 24 days of engine time (a shim's
// engine runs on wall time) every time reads as that instant, so retention
// and the last-use order degrade to plain LRU order, never to garbage.
func msOf(d time.Duration) engineMs {
	if ms := d / time.Millisecond; ms < math.MaxInt32 {
		return engineMs(ms)
	}
	return math.MaxInt32
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
		p.pushBack(i, 0)
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

// pushBack appends b, last used at now, to the tail of its queue (most
// recently used).
func (p *blockPool) pushBack(b int32, now engineMs) {
	p.blk[b].freedAt = now
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
	p.blk[b].retainUntil, p.blk[b].freedAt = 0, 0
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

// front is the next block to reuse or evict at engine time now, or
// nilBlock. (Spelled out: it is on the allocation path.)
func (p *blockPool) front(now engineMs) int32 {
	s := int32(len(p.blk) - queueEmpty)
	if f := p.blk[s].next; f != s {
		return f
	}
	c, r := p.blk[s+1].next, p.blk[s+2].next
	cachedOK, retainedOK := c != s+1, r != s+2
	switch {
	case retainedOK && p.blk[r].retainUntil <= now && (!cachedOK || p.blk[r].freedAt < p.blk[c].freedAt):
		return r // retention ran out, and idle for longer than the cached head
	case cachedOK:
		return c
	case retainedOK:
		return r
	}
	return nilBlock
}

// retain keeps a cached block ahead of unretained ones in the eviction
// order until the engine time until (a later retention wins).
func (p *blockPool) retain(b int32, until engineMs) {
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
func (p *blockPool) release(b int32, now engineMs) {
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
	p.pushBack(b, now)
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
	p.blk[b].landsAt = 0
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
