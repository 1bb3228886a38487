package flashindex

import (
	"slices"

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
func (ix *Index) Resident(m *Matches, anchors []kv.BlockHash, buf []kv.BlockHash) (chain []kv.BlockHash, used int) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	chain, used = buf, -1
	for i, a := range anchors {
		var ok bool
		if chain, ok = ix.chainLocked(a, chain); ok {
			used = i
			break
		}
	}
	if used < 0 {
		chain = chain[:0] // an empty chain matches no worker
	}
	ix.matchLocked(m, chain, FindOptions{})
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
