package flashindex

import (
	"slices"
	"sync"

	"switchyard.dev/pkg/kv"
)

// Chain returns the sequence hashes from the root of the index's tree to
// tip, root first, into buf (reused), and whether the whole chain is known:
// tip is in the index and every block above it was linked by a Stored event
// up to a root. It is how a caller that kept only a prompt's last block
// asks what is still resident of that prompt (FindMatches on the chain).
//
// The walk costs one step per block of the chain.
func (ix *Index) Chain(tip kv.BlockHash, buf []kv.BlockHash) ([]kv.BlockHash, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.chainLocked(tip, buf)
}

func (ix *Index) chainLocked(tip kv.BlockHash, buf []kv.BlockHash) ([]kv.BlockHash, bool) {
	out := buf[:0]
	i, ok := ix.ids.get(tip)
	if !ok {
		return out, false
	}
	for steps := 0; ; steps++ {
		n := ix.node(i)
		out = append(out, n.hash)
		if n.flags()&fParentKnown == 0 || steps > ix.slabLen {
			// An orphan: the chain's position under the root is unknown
			// (steps bounds a walk the invariants say cannot loop).
			return out[:0], false
		}
		ref := n.parentRef()
		if ref == 0 {
			break
		}
		i = ref - 1
	}
	slices.Reverse(out)
	return out, true
}

// Resident is FindMatches of the chain that ends at the first of anchors
// (block hashes, deepest first) whose chain the index knows (Chain): every
// worker's device prefix of it and its host, disk and shared extensions, in
// blocks. It returns the chain and which anchor it ends at; with none known
// (each left every tier, or is not linked to a root) no worker matches, the
// chain is empty and used is -1.
// The walks and the match see one state of the index.
//
// A chain once walked is kept (residentChains): the scheduler asks about the
// same idle programs every tick, and the walk, a cache miss per block, was
// most of what a question cost.
func (ix *Index) Resident(m *Matches, anchors []kv.BlockHash, buf []kv.BlockHash) (chain []kv.BlockHash, used int) {
	return ix.ResidentWith(m, anchors, buf, FindOptions{})
}

// ResidentWith is Resident with options: the match is FindMatchesWith's.
func (ix *Index) ResidentWith(m *Matches, anchors []kv.BlockHash, buf []kv.BlockHash, opt FindOptions) (chain []kv.BlockHash, used int) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	chain, used = buf, -1
	for i, a := range anchors {
		if kept, ok := ix.resident.get(a); ok {
			chain, used = append(chain[:0], kept...), i
			break
		}
		var ok bool
		if chain, ok = ix.chainLocked(a, chain); ok {
			ix.resident.put(a, chain)
			used = i
			break
		}
	}
	if used < 0 {
		chain = chain[:0] // an empty chain matches no worker
	}
	ix.matchLocked(m, chain, opt)
	return chain, used
}

// Of returns worker's match: with several dp ranks, the rank with the
// longest device prefix (then the longest host and disk extensions), the
// one a turn routed to the worker would find its prompt on.
func (m *Matches) Of(worker string) (WorkerMatch, bool) {
	best, found := WorkerMatch{}, false
	for _, w := range m.Workers {
		if w.Worker == worker && (!found || w.Device > best.Device ||
			w.Device == best.Device && w.Host+w.Disk > best.Host+best.Disk) {
			best, found = w, true
		}
	}
	return best, found
}

// residentChains keeps the chains Resident walked, by the block they end
// at. A kept chain stays true while that block is in the index: a node's
// parent, once known, never changes, and a node with a child is not
// deleted, so every block above a live one stays, linked as it was. The
// index forgets a block's chain when it deletes the block (maybeDelete, its
// one deletion), under its write lock; Resident's readers share the read
// lock, hence mu between them.
type residentChains struct {
	mu     sync.Mutex
	chains map[kv.BlockHash][]kv.BlockHash
	hashes int // in chains, each with its bookkeeping: at most maxResidentHashes
}

// maxResidentHashes bounds the kept chains, in 8-byte hashes: 16 MiB, the
// chains of about 1,000 idle programs of 128k tokens in 64-token blocks
// (8,000 in 16-token blocks of 8k tokens). Past it they are all dropped and
// kept again as they are walked: no worse than walking every one.
const maxResidentHashes = 1 << 21

// chainBookkeeping is what a kept chain costs besides its hashes, in hashes:
// its map entry and slice header, about 64 bytes, so that many short
// chains are bounded by their memory too.
const chainBookkeeping = 8

func (c *residentChains) get(tip kv.BlockHash) ([]kv.BlockHash, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	chain, ok := c.chains[tip]
	return chain, ok
}

func (c *residentChains) put(tip kv.BlockHash, chain []kv.BlockHash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cost := len(chain) + chainBookkeeping
	if cost > maxResidentHashes {
		return
	}
	if c.chains == nil || c.hashes+cost > maxResidentHashes {
		c.chains, c.hashes = map[kv.BlockHash][]kv.BlockHash{}, 0
	}
	if old, ok := c.chains[tip]; ok { // two readers walked it at once
		c.hashes -= len(old) + chainBookkeeping
	}
	c.chains[tip] = slices.Clone(chain)
	c.hashes += cost
}

// forget drops the chain ending at tip, which the index is deleting. It
// runs under the index's write lock, which no Resident holds the read lock
// beside: mu is not needed.
func (c *residentChains) forget(tip kv.BlockHash) {
	if old, ok := c.chains[tip]; ok {
		delete(c.chains, tip)
		c.hashes -= len(old) + chainBookkeeping
	}
}
