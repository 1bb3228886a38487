package flashindex

import (
	"unsafe"

	"switchyard.dev/pkg/kv"
)

// Stats describes the index.
type Stats struct {
	Blocks      int              // distinct blocks tracked, including holder-less chain links
	Entries     [kv.NumTiers]int // (block, worker, dp) pairs per tier
	Workers     int              // workers with state
	Slots       int              // live (worker, dp) pairs
	Levels      int              // cumulative tier levels tracked
	Unrooted    int              // (block, slot, level) holdings missing part of their prefix
	BlockEvents uint64           // blocks in applied Stored/Removed events
	Duplicates  uint64           // stores of held blocks and removals of absent ones
	Dropped     uint64           // blocks refused because MaxBlocks was reached
	Clears      uint64           // Cleared events and worker removals
	ApproxBytes int              // estimated heap held by the index
	MaxBlocks   int              // the configured cap
	Predictions int              // live predicted-on-route entries (Predict), expired ones included until swept
	Predicted   int              // blocks in those predictions
}

// TotalEntries is the number of (block, worker, dp, tier) entries.
func (s Stats) TotalEntries() int {
	n := 0
	for _, e := range s.Entries {
		n += e
	}
	return n
}

// Stats returns a snapshot of the index's counters.
func (ix *Index) Stats() Stats {
	ix.wmu.Lock()
	workers := len(ix.workers)
	ix.wmu.Unlock()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	st := Stats{
		Blocks:      ix.ids.len(),
		Entries:     ix.entries,
		Workers:     workers,
		Levels:      ix.levels,
		BlockEvents: ix.counters.blockEvents,
		Duplicates:  ix.counters.duplicates,
		Dropped:     ix.counters.dropped,
		Clears:      ix.counters.clears,
		MaxBlocks:   ix.cfg.MaxBlocks,
		Predictions: len(ix.pred.byExpiry),
		Predicted:   ix.pred.blocks,
	}
	for i := range ix.slots {
		if ix.slots[i].used && !ix.slots[i].dead {
			st.Slots++
			for level := 0; level < ix.levels; level++ {
				st.Unrooted += ix.slots[i].unrooted[level]
			}
		}
	}
	// Slab + block table + side sets and their per-node numbers + bitsets.
	st.ApproxBytes = len(ix.chunks)*chunkSize*int(unsafe.Sizeof(node{})) + ix.ids.bytes() +
		len(ix.sides)*sideChunkSize*int(unsafe.Sizeof(sideSets{})) + 4*cap(ix.sideFree) + ix.sideOfBytes() +
		ix.bits.bytes() + ix.pred.blocks*predictedBlockBytes
	return st
}

// sideOfBytes is the memory of the per-node side-set numbers.
func (ix *Index) sideOfBytes() int {
	n := 0
	for _, chunk := range ix.sideOf {
		n += 4 * len(chunk)
	}
	return n
}

// Len is the number of distinct blocks tracked.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.ids.len()
}

// RankedEvent is an event of one dp rank of a worker.
type RankedEvent struct {
	DPRank uint32
	kv.Event
}

// Dump returns Stored events that rebuild worker's holdings when applied to
// an empty index (in any order): one event per maximal chain segment held on
// one tier by one dp rank.
func (ix *Index) Dump(worker string) []RankedEvent {
	ix.wmu.Lock()
	ws := ix.workers[worker]
	ix.wmu.Unlock()
	if ws == nil {
		return nil
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var out []RankedEvent
	type item struct {
		i      uint32
		parent kv.BlockHash
	}
	var stack []item
	for dp, s := range ws.slots {
		for t := kv.Tier(0); int(t) < kv.NumTiers; t++ {
			holds := func(i uint32) bool {
				n := ix.node(i)
				set := ix.tierSet(i, n, t, false)
				return set != nil && set.has(&ix.bits, s)
			}
			for i := uint32(0); int(i) < ix.slabLen; i++ {
				n := ix.node(i)
				if n.flags()&fUsed == 0 || !holds(i) {
					continue
				}
				var parent kv.BlockHash
				if pr := n.parentRef(); pr != 0 {
					if holds(pr - 1) {
						continue // not a segment head
					}
					parent = ix.node(pr - 1).hash
				}
				stack = append(stack[:0], item{i, parent})
				for len(stack) > 0 {
					it := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					ev := kv.Event{Kind: kv.Stored, Tier: t, Parent: it.parent}
					cur := it.i
					for {
						ev.Blocks = append(ev.Blocks, ix.node(cur).hash)
						next := uint32(0)
						for ch := ix.node(cur).child; ch != 0; ch = ix.node(ch - 1).sibling {
							if !holds(ch - 1) {
								continue
							}
							if next == 0 {
								next = ch
							} else {
								stack = append(stack, item{ch - 1, ix.node(cur).hash})
							}
						}
						if next == 0 {
							break
						}
						cur = next - 1
					}
					out = append(out, RankedEvent{DPRank: dp, Event: ev})
				}
			}
		}
	}
	return out
}

// HasWorker reports whether the index has state for worker (it has applied
// an event of it and not removed it since).
func (ix *Index) HasWorker(worker string) bool {
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	_, ok := ix.workers[worker]
	return ok
}
