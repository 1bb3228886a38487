package enginesim

import "switchyard.dev/pkg/kv"

// nilBlock marks "no block" in links and tables.
const nilBlock int32 = -1

// blockPool is the device KV cache: NumGPUBlocks physical blocks in dense
// arrays, an intrusive doubly linked free queue and a hash → block map of the
// cached (full, hashed) blocks, as in vLLM v1's BlockPool.
//
// A block is in exactly one of three states:
//   - in use: ref > 0, not in the free queue (it may or may not be cached);
//   - free and cached: ref == 0, in the free queue, still findable by hash;
//   - free and empty: ref == 0, in the free queue, no hash.
//
// The free queue is the eviction order: its head is evicted first. Freed
// cached blocks go to the tail (most recently used) and requests free their
// blocks last-first, so a sequence's leaves are evicted before its parents;
// empty blocks go to the head because reusing them costs nothing.
type blockPool struct {
	// blk holds one block per entry plus the free queue's sentinel at the
	// end. Array of structs: evicting or naming a block touches one cache
	// line, not one per field.
	blk     []blockMeta
	numFree int
	numUsed int // blocks with ref > 0
	byHash  hashIndex
}

type blockMeta struct {
	hash    kv.BlockHash // valid when cached
	parent  kv.BlockHash // hash of the previous block in the sequence, 0 for a root
	ref     int32
	pos     int32 // block index within its sequence (root = 0)
	session int32 // interned session of the request that computed it
	// Free queue links (block indices; the sentinel is len(blk)-1).
	prev, next int32
	cached     bool
	inFree     bool
}

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		blk:    make([]blockMeta, n+1),
		byHash: newHashIndex(n),
	}
	s := int32(n)
	p.blk[s].prev, p.blk[s].next = s, s
	for i := range int32(n) {
		p.pushBack(i)
	}
	return p
}

func (p *blockPool) size() int       { return len(p.blk) - 1 }
func (p *blockPool) sentinel() int32 { return int32(len(p.blk) - 1) }

func (p *blockPool) pushBack(b int32) {
	s := p.sentinel()
	last := p.blk[s].prev
	p.blk[b].prev, p.blk[b].next = last, s
	p.blk[last].next = b
	p.blk[s].prev = b
	p.blk[b].inFree = true
	p.numFree++
}

func (p *blockPool) pushFront(b int32) {
	s := p.sentinel()
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

// front is the next block to evict, or nilBlock.
func (p *blockPool) front() int32 {
	s := p.sentinel()
	if f := p.blk[s].next; f != s {
		return f
	}
	return nilBlock
}

// touch takes a reference on a block found by a prefix hit.
func (p *blockPool) touch(b int32) {
	if p.blk[b].ref == 0 {
		p.unlink(b)
		p.numUsed++
	}
	p.blk[b].ref++
}

// release drops a reference; the last one returns the block to the free queue.
func (p *blockPool) release(b int32) {
	p.blk[b].ref--
	if p.blk[b].ref > 0 {
		return
	}
	p.numUsed--
	if p.blk[b].cached {
		p.pushBack(b)
	} else {
		p.pushFront(b)
	}
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
	p.blk[b].hash, p.blk[b].parent = 0, 0
}
