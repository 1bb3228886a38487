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

// Resident is FindMatches of the chain that ends at tip (Chain): every
// worker's device prefix of it and its host, disk and shared extensions,
// in blocks, and the chain's length. An unknown chain (tip gone from every
// tier, or not linked to a root) holds nothing anywhere: no workers and a
// length of 0.
func (ix *Index) Resident(m *Matches, tip kv.BlockHash, buf []kv.BlockHash) (chain []kv.BlockHash) {
	chain, ok := ix.Chain(tip, buf)
	if !ok {
		m.Workers, m.DeviceDepths, m.Probes, m.PoolPrefix = m.Workers[:0], m.DeviceDepths[:0], 0, 0
		return chain
	}
	ix.FindMatchesInto(m, chain)
	return chain
}
