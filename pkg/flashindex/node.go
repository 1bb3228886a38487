package flashindex

import (
	"unsafe"

	"switchyard.dev/pkg/kv"
)

// node is one block. Invariants (all under Index.mu):
//
//   - A node with fParentKnown and a parent is linked into its parent's
//     child list, and the parent node exists (possibly as a holder-less
//     "ghost" kept only so the link survives).
//   - A node is deleted as soon as it has no holders on any tier and no
//     children.
//   - Cumulative level k counts a slot as holding a block when it holds it on
//     any of tiers 0..k. For each level and each slot s holding the block at
//     that level: s is "rooted" at the level iff the block is a root or s is
//     rooted at the same level in the parent. Non-rooted holders are recorded in the node's side sets
//     (out-of-order events, evictions from the middle of a chain or of a
//     parent first). Rooted sets therefore shrink monotonically along any
//     chain, which is what makes bisection exact.
type node struct {
	hash kv.BlockHash
	// flagsParent packs the flags (low flagBits bits) and the parent node as
	// index+1 (with fParentKnown, 0 = root). With the 8-byte slotSet a node
	// is 32 bytes: never split across cache lines, and free of pointers, so
	// the garbage collector never scans the slab.
	flagsParent uint32
	child       uint32  // first child, as index+1; 0 = none
	sibling     uint32  // next sibling in the parent's child list, index+1
	prev        uint32  // previous sibling, index+1; 0 = first child
	dev         slotSet // device holders
}

const (
	flagBits = 4
	flagMask = 1<<flagBits - 1
	// maxNodes keeps node index+1 within flagsParent's upper 28 bits.
	maxNodes = 1<<(32-flagBits) - 2
)

func (n *node) flags() uint32     { return n.flagsParent & flagMask }
func (n *node) parentRef() uint32 { return n.flagsParent >> flagBits }

// setParent records the parent node as index+1, keeping the flags.
func (n *node) setParent(ref uint32) { n.flagsParent = n.flagsParent&flagMask | ref<<flagBits }

const (
	fUsed        = 1 << iota // slab entry in use
	fParentKnown             // parent was set by a Stored event
	fLower                   // the node's side sets hold host/disk/shared holders
	fUnrooted                // the node's side sets hold non-rooted holders
)

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
)

type lowerSets [kv.NumTiers - 1]slotSet // holders on tiers 1..NumTiers-1, lowerSets[t-1] for tier t
type levelSets [kv.NumTiers]slotSet     // per cumulative level

// sideSets are a node's sets that most nodes lack: its holders on host, disk
// and shared tiers (fLower) and its non-rooted holders (fUnrooted).
//
// They live in a chunked slab (sides), found through a per-node number in a
// slab parallel to the nodes' (sideOf). With tiers, demotions and lower-tier
// evictions make un-rooting and re-rooting whole subtrees routine, and every
// step of those walks asks for these sets: an array load instead of a Go map
// lookup, and a free list instead of an allocation per entry, is most of
// what those walks cost. A node chunk whose nodes never had side sets (a
// device-only fleet) has no sideOf chunk.
type sideSets struct {
	lower    lowerSets // fLower
	unrooted levelSets // fUnrooted
}

func (ix *Index) node(i uint32) *node { return &ix.chunks[i>>chunkBits][i&(chunkSize-1)] }

const (
	sideChunkBits = 10
	sideChunkSize = 1 << sideChunkBits
)

// side returns node i's side sets; the node must have fLower or fUnrooted.
// The pointer stays valid until the node loses both flags.
func (ix *Index) side(i uint32) *sideSets {
	k := ix.sideOf[i>>chunkBits][i&(chunkSize-1)] - 1
	return &ix.sides[k>>sideChunkBits][k&(sideChunkSize-1)]
}

// alloc takes an entry of a chunked slab (chunks of size entries, the first
// used of them): one freed before, else the next, with a new chunk when the
// last is full. The node slab and the side-set slab both grow this way.
func alloc[T any](free *[]uint32, chunks *[][]T, used *int, size int) uint32 {
	if n := len(*free); n > 0 {
		k := (*free)[n-1]
		*free = (*free)[:n-1]
		return k
	}
	if *used == len(*chunks)*size {
		*chunks = append(*chunks, make([]T, size))
	}
	k := uint32(*used)
	*used++
	return k
}

// addSide gives node i, which has neither fLower nor fUnrooted, empty side
// sets.
func (ix *Index) addSide(i uint32) {
	k := alloc(&ix.sideFree, &ix.sides, &ix.sideLen, sideChunkSize)
	chunk := i >> chunkBits
	for int(chunk) >= len(ix.sideOf) {
		ix.sideOf = append(ix.sideOf, nil)
	}
	if ix.sideOf[chunk] == nil {
		ix.sideOf[chunk] = make([]uint32, chunkSize)
	}
	ix.sideOf[chunk][i&(chunkSize-1)] = k + 1
}

// dropSide releases node i's side sets, all empty, if the caller just
// cleared the last of the node's side flags.
func (ix *Index) dropSide(i uint32, n *node) {
	if n.flags()&(fLower|fUnrooted) != 0 {
		return
	}
	ref := &ix.sideOf[i>>chunkBits][i&(chunkSize-1)]
	ix.sideFree = append(ix.sideFree, *ref-1)
	*ref = 0
}

// lower returns node i's lower-tier holders, or nil without fLower.
func (ix *Index) lower(i uint32, n *node) *lowerSets {
	if n.flags()&fLower == 0 {
		return nil
	}
	return &ix.side(i).lower
}

// unrooted returns node i's non-rooted holders, or nil without fUnrooted.
func (ix *Index) unrooted(i uint32, n *node) *levelSets {
	if n.flags()&fUnrooted == 0 {
		return nil
	}
	return &ix.side(i).unrooted
}

// newNode allocates a node for h, which must be absent, and maps h to it.
func (ix *Index) newNode(h kv.BlockHash) uint32 {
	tag := tagOf(h)
	ix.ids.reserve(1)
	pos, _ := ix.ids.find(h, tag)
	return ix.newNodeAt(h, tag, pos)
}

// newNodeAt is newNode for the empty table slot pos that find returned for h.
func (ix *Index) newNodeAt(h kv.BlockHash, tag, pos uint64) uint32 {
	i := alloc(&ix.free, &ix.chunks, &ix.slabLen, chunkSize)
	*ix.node(i) = node{hash: h, flagsParent: fUsed}
	ix.ids.insertAt(pos, tag, i)
	return i
}

// link makes child the first child of parent.
func (ix *Index) link(parent, child uint32) {
	pn, cn := ix.node(parent), ix.node(child)
	cn.sibling = pn.child
	cn.prev = 0
	if pn.child != 0 {
		ix.node(pn.child - 1).prev = child + 1
	}
	pn.child = child + 1
}

// unlink is O(1): shared prefixes (a system prompt's last block) can have
// thousands of children.
func (ix *Index) unlink(parent, child uint32) {
	cn := ix.node(child)
	if cn.prev == 0 {
		ix.node(parent).child = cn.sibling
	} else {
		ix.node(cn.prev - 1).sibling = cn.sibling
	}
	if cn.sibling != 0 {
		ix.node(cn.sibling - 1).prev = cn.prev
	}
	cn.sibling, cn.prev = 0, 0
}

// tierSet returns the holders of node i on tier t, creating the lower-tier
// sets when create is set; nil when absent.
func (ix *Index) tierSet(i uint32, n *node, t kv.Tier, create bool) *slotSet {
	if t == kv.TierDevice {
		return &n.dev
	}
	if n.flags()&fLower == 0 {
		if !create {
			return nil
		}
		if n.flags()&fUnrooted == 0 {
			ix.addSide(i)
		}
		n.flagsParent |= fLower
	}
	return &ix.side(i).lower[t-1]
}

// dropLowerIfEmpty clears fLower (and releases the side sets when the node
// has no other use for them) once node i has no lower-tier holder left.
func (ix *Index) dropLowerIfEmpty(i uint32, n *node) {
	if n.flags()&fLower == 0 {
		return
	}
	lower := &ix.side(i).lower
	for t := range lower {
		if !lower[t].empty() {
			return
		}
	}
	n.flagsParent &^= fLower
	ix.dropSide(i, n)
}

// maybeDelete removes node i if it has no holders and no children, then
// walks up removing ghost ancestors that were kept only for it.
// hint is a table slot that may hold node i's entry (where the prefetch
// found it, if no deletion since moved it); any slot will do when unknown.
func (ix *Index) maybeDelete(i uint32, hint uint64) {
	for {
		n := ix.node(i)
		if !n.dev.empty() || n.flags()&(fLower|fUnrooted) != 0 || n.child != 0 {
			return
		}
		pi, ok := n.parentRef()-1, n.parentRef() != 0
		if ok {
			ix.unlink(pi, i)
		}
		tag := tagOf(n.hash)
		ix.ids.del(tag, i, hint)
		ix.resident.forget(n.hash)
		*n = node{}
		ix.free = append(ix.free, i)
		if !ok {
			return
		}
		i, hint = pi, ix.ids.home(tag)
	}
}

var _ [32 - unsafe.Sizeof(node{})]struct{} // a node must stay within 32 bytes
