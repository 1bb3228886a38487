package flashindex

import "switchyard.dev/pkg/kv"

// Rooting: slot s is rooted at a node on cumulative level k when it holds
// the node and every ancestor on tiers 0..k (node's invariants). A holder
// that is not rooted is listed in the node's unrooted set for that level, so
// that "rooted" costs two set lookups and FindMatches can bisect.

// minTier is the fastest tier on which s holds node i, or NumTiers.
func (ix *Index) minTier(i uint32, n *node, s slot) int {
	if n.dev.has(&ix.bits, s) {
		return 0
	}
	if lower := ix.lower(i, n); lower != nil {
		for t := range lower {
			if lower[t].has(&ix.bits, s) {
				return t + 1
			}
		}
	}
	return kv.NumTiers
}

// heldAt reports whether s holds node i on any of tiers 0..level.
func (ix *Index) heldAt(i uint32, n *node, s slot, level int) bool {
	if n.dev.has(&ix.bits, s) {
		return true
	}
	if level > 0 && n.flags()&fLower != 0 {
		lower := &ix.side(i).lower
		for t := 0; t < level; t++ {
			if lower[t].has(&ix.bits, s) {
				return true
			}
		}
	}
	return false
}

// inUnrooted reports whether s is listed as a non-rooted holder of node i at
// level.
func (ix *Index) inUnrooted(i uint32, n *node, s slot, level int) bool {
	return n.flags()&fUnrooted != 0 && ix.side(i).unrooted[level].has(&ix.bits, s)
}

func (ix *Index) rootedAt(i uint32, n *node, s slot, level int) bool {
	return ix.heldAt(i, n, s, level) && !ix.inUnrooted(i, n, s, level)
}

// addUnrooted lists s as a non-rooted holder of node i at level.
func (ix *Index) addUnrooted(i uint32, n *node, s slot, level int) {
	if n.flags()&fUnrooted == 0 {
		if n.flags()&fLower == 0 {
			ix.addSide(i)
		}
		n.flagsParent |= fUnrooted
	}
	if ix.side(i).unrooted[level].add(&ix.bits, s) {
		ix.slots[s].unrooted[level]++
	}
}

// removeUnrooted takes s off node i's non-rooted holders at level: it became
// rooted there, or stopped holding the node.
func (ix *Index) removeUnrooted(i uint32, n *node, s slot, level int) {
	unrooted := &ix.side(i).unrooted
	if unrooted[level].remove(&ix.bits, s) {
		ix.slots[s].unrooted[level]--
	}
	ix.dropUnrootedIfEmpty(i, n)
}

// dropUnrootedIfEmpty clears fUnrooted (and releases the side sets when the
// node has no other use for them) once node i has no non-rooted holder left.
func (ix *Index) dropUnrootedIfEmpty(i uint32, n *node) {
	if n.flags()&fUnrooted == 0 {
		return
	}
	unrooted := &ix.side(i).unrooted
	for level := range unrooted {
		if !unrooted[level].empty() {
			return
		}
	}
	n.flagsParent &^= fUnrooted
	ix.dropSide(i, n)
}

// reroot: s just became rooted at level in node i; its held-but-unrooted
// descendants become rooted too.
func (ix *Index) reroot(i uint32, s slot, level int) {
	ix.descend(i, func(ci uint32, cn *node) bool {
		if !ix.inUnrooted(ci, cn, s, level) {
			return false
		}
		ix.removeUnrooted(ci, cn, s, level)
		return true
	})
}

// unroot: s just stopped being rooted at level in node i; its rooted
// descendants stop being rooted.
func (ix *Index) unroot(i uint32, s slot, level int) {
	ix.descend(i, func(ci uint32, cn *node) bool {
		if !ix.heldAt(ci, cn, s, level) || ix.inUnrooted(ci, cn, s, level) {
			return false
		}
		ix.addUnrooted(ci, cn, s, level)
		return true
	})
}

// descend walks node i's descendants depth first, going on below a child
// only when visit, which sees every child reached, says so.
func (ix *Index) descend(i uint32, visit func(ci uint32, cn *node) bool) {
	stack := append(ix.stack[:0], i)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for ch := ix.node(x).child; ch != 0; {
			ci := ch - 1
			cn := ix.node(ci)
			ch = cn.sibling
			if visit(ci, cn) {
				stack = append(stack, ci)
			}
		}
	}
	ix.stack = stack[:0]
}

// ensureLevels starts tracking cumulative levels up to want-1. Until a tier
// is first seen, its level equals the one below, so the new levels start as
// copies of the highest tracked one.
func (ix *Index) ensureLevels(want int) {
	if want <= ix.levels {
		return
	}
	top := ix.levels - 1
	// Free side entries hold empty sets, so every entry may be visited.
	for k := 0; k < ix.sideLen; k++ {
		unrooted := &ix.sides[k>>sideChunkBits][k&(sideChunkSize-1)].unrooted
		for level := ix.levels; level < want; level++ {
			unrooted[top].forEach(&ix.bits, func(s slot) { unrooted[level].add(&ix.bits, s) })
		}
	}
	for s := range ix.slots {
		for level := ix.levels; level < want; level++ {
			ix.slots[s].unrooted[level] = ix.slots[s].unrooted[top]
		}
	}
	ix.levels = want
}
