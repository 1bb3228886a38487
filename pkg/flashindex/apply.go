package flashindex

import (
	"fmt"
	"sync"

	"switchyard.dev/pkg/kv"
)

// workerState is one worker's entry in Index.workers: its dp ranks' slots and
// the mutex that keeps its events in order.
type workerState struct {
	mu    sync.Mutex // serialises this worker's Apply calls
	name  string
	slots map[uint32]slot // dp rank → slot; guarded by Index.mu
	gone  bool            // removed; callers must look the worker up again
}

// worker returns the state of worker name, creating it.
func (ix *Index) worker(name string) *workerState {
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	ws := ix.workers[name]
	if ws == nil {
		ws = &workerState{name: name, slots: make(map[uint32]slot)}
		ix.workers[name] = ws
	}
	return ws
}

// lockWorker returns worker name's state with its mutex held.
func (ix *Index) lockWorker(name string) *workerState {
	for {
		ws := ix.worker(name)
		ws.mu.Lock()
		if !ws.gone {
			return ws
		}
		ws.mu.Unlock()
	}
}

// slotFor returns the slot of (ws, dp), allocating one. Needs ix.mu held.
func (ix *Index) slotFor(ws *workerState, dp uint32) (slot, error) {
	if s, ok := ws.slots[dp]; ok {
		return s, nil
	}
	var s slot
	if n := len(ix.freeSlots); n > 0 {
		s = ix.freeSlots[n-1]
		ix.freeSlots = ix.freeSlots[:n-1]
	} else {
		if len(ix.slots) >= maxSlots {
			return 0, ErrTooManySlots
		}
		s = slot(len(ix.slots))
		ix.slots = append(ix.slots, slotState{})
		if need := len(ix.slots)/64 + 1; len(ix.deadMask) < need {
			ix.deadMask = append(ix.deadMask, 0)
		}
	}
	ix.slots[s] = slotState{worker: ws.name, dp: dp, used: true}
	ws.slots[dp] = s
	return s, nil
}

// Apply applies one event from worker's dp rank. Events of one worker must be
// applied in order (the caller's job); events of different workers may be
// applied concurrently. Stored blocks already held and Removed blocks not
// held are ignored (counted as duplicates), so replays are harmless.
//
// An event is applied in chunks of Config.WriteChunk blocks, and the write
// lock is released between chunks so that no lookup waits behind a long
// event. A reader (FindMatches, Dump, Stats) may therefore see an event in
// part: the index is then exactly what it would be had the event's first
// chunks been sent as events of their own. Every invariant holds and each
// block of the event is either as before it or as after it: a Stored chain
// shows as a shorter prefix, so the worker's match is never more than the
// whole event gives, and a Removed list as partly removed, so some of its
// blocks still show as held, as all of them did before the event. The
// worker's mutex is held throughout: its later events, Cleared and
// RemoveWorker wait for the whole event, while other workers' events and
// sweeps may run between the chunks.
func (ix *Index) Apply(worker string, dpRank uint32, ev kv.Event) error {
	if !ev.Tier.Valid() {
		return fmt.Errorf("%w: tier %d", ErrBadEvent, ev.Tier)
	}
	switch ev.Kind {
	case kv.Stored, kv.Removed:
	case kv.Cleared:
		ix.clearWorker(worker, false)
		return nil
	default:
		return fmt.Errorf("%w: kind %d", ErrBadEvent, ev.Kind)
	}
	ws := ix.lockWorker(worker)
	defer ws.mu.Unlock()

	blocks := ev.Blocks
	parent := ev.Parent
	for first := true; first || len(blocks) > 0; first = false {
		n := min(len(blocks), ix.cfg.WriteChunk)
		chunk := blocks[:n]
		blocks = blocks[n:]
		ix.mu.Lock()
		s, err := ix.slotFor(ws, dpRank)
		if err != nil {
			ix.mu.Unlock()
			return err
		}
		ix.counters.blockEvents += uint64(len(chunk))
		if ev.Kind == kv.Stored {
			ix.ensureLevels(int(ev.Tier) + 1)
			if !ix.storeLocked(s, ev.Tier, parent, chunk) {
				ix.counters.dropped += uint64(len(blocks))
				ix.mu.Unlock()
				return nil
			}
			if n > 0 {
				parent = chunk[n-1]
			}
		} else {
			ix.removeLocked(s, ev.Tier, chunk)
		}
		if ev.Tier == kv.TierDevice && len(ix.pred.workers) > 0 {
			ix.pred.reconcile(predKey{worker, dpRank}, ev.Kind, chunk)
		}
		ix.mu.Unlock()
	}
	return nil
}

// storeLocked adds s as a holder of blocks (a chain extending parent) on
// tier. It returns false if it stopped early (MaxBlocks or an invalid hash).
func (ix *Index) storeLocked(s slot, tier kv.Tier, parent kv.BlockHash, blocks []kv.BlockHash) bool {
	levels := ix.levels
	var parentRooted [kv.NumTiers]bool // s rooted in the parent, per level
	var parentRef uint32               // parent node index+1, 0 = none
	if parent == 0 {
		for level := range parentRooted {
			parentRooted[level] = true
		}
	} else if pi, ok := ix.ids.get(parent); ok {
		parentRef = pi + 1
		pn := ix.node(pi)
		for level := 0; level < levels; level++ {
			parentRooted[level] = ix.rootedAt(pi, pn, s, level)
		}
	}
	state := &ix.slots[s]
	// Room for every block and a ghost parent, so that no slot moves
	// between the prefetch and the inserts.
	ix.ids.reserve(len(blocks) + 1)
	found := ix.prefetch(blocks)
	for k, b := range blocks {
		if b == 0 {
			ix.counters.dropped += uint64(len(blocks) - k)
			return false
		}
		// Nothing is deleted while storing, so a block found by the
		// prefetch is still there; one not found may be by now (listed
		// twice, or created as a ghost parent above), hence the probe.
		i := found[k] - 1
		if found[k] == 0 {
			// The empty slot the prefetch found is still where b goes
			// unless an insert since filled it.
			pos, ok := ix.at[k], false
			if ix.ids.e[pos] != 0 {
				pos, ok = ix.ids.find(b, ix.tags[k])
			}
			if ok {
				i = uint32(ix.ids.e[pos]) - 1
			} else {
				if ix.ids.len() >= ix.cfg.MaxBlocks {
					ix.counters.dropped += uint64(len(blocks) - k)
					return false
				}
				i = ix.newNodeAt(b, ix.tags[k], pos)
			}
		}
		n := ix.node(i)
		if n.flags()&fParentKnown == 0 {
			n.flagsParent |= fParentKnown
			if parent != 0 {
				if parentRef == 0 {
					// Keep a holder-less ghost of the parent so the chain
					// link survives until the parent's own Stored arrives.
					parentRef = ix.newNode(parent) + 1
					n = ix.node(i)
				}
				n.setParent(parentRef)
				ix.link(parentRef-1, i)
			}
		}
		fastest := ix.minTier(i, n, s) // before this store
		if ix.tierSet(i, n, tier, true).add(&ix.bits, s) {
			state.held[tier]++
			ix.entries[tier]++
		} else {
			ix.counters.duplicates++
		}
		var rooted [kv.NumTiers]bool
		for level := 0; level < levels; level++ {
			switch {
			case level >= int(tier) && fastest > level: // newly held at this level
				if parentRooted[level] {
					rooted[level] = true
					if state.unrooted[level] > 0 {
						ix.reroot(i, s, level)
					}
				} else {
					ix.addUnrooted(i, n, s, level)
				}
			default:
				rooted[level] = ix.rootedAt(i, n, s, level)
			}
		}
		parentRooted = rooted
		parent = b
		parentRef = i + 1
	}
	return true
}

// prefetch looks every block up before any is changed, in passes whose
// loads are independent of each other, so the CPU overlaps their cache misses
// instead of paying them one after another inside the dependent update loop
// (the index is far larger than the cache, and a miss that waits alone costs
// hundreds of nanoseconds: this is most of apply's cost). First every block's
// home table slot, then the probes, whose full-hash checks load the nodes (a
// node is 32 bytes in a 32-byte-aligned slab: one cache line). It fills
// ix.tags, ix.found and ix.at and returns ix.found: node index+1 or 0 per
// block, valid until the first deletion.
func (ix *Index) prefetch(blocks []kv.BlockHash) []uint32 {
	ix.ids.reserve(0) // allocates a new index's table
	tags := ix.tags[:0]
	for _, b := range blocks {
		tags = append(tags, tagOf(b))
	}
	ix.tags = tags
	ix.sink += ix.ids.touch(tags)
	f, at := ix.found[:0], ix.at[:0]
	for k, b := range blocks {
		pos, ok := ix.ids.find(b, tags[k])
		var i uint32
		if ok {
			i = uint32(ix.ids.e[pos])
		}
		f = append(f, i)
		at = append(at, pos)
	}
	ix.found, ix.at = f, at
	return f
}

// removeLocked drops s as a holder of blocks on tier; the holders below each
// block that were rooted through it on a level it no longer holds stop being
// rooted there.
func (ix *Index) removeLocked(s slot, tier kv.Tier, blocks []kv.BlockHash) {
	state := &ix.slots[s]
	found := ix.prefetch(blocks)
	for k, b := range blocks {
		i := found[k]
		if i == 0 {
			ix.counters.duplicates++
			continue
		}
		i--
		n := ix.node(i)
		if n.hash != b || n.flags()&fUsed == 0 {
			// Deleted earlier in this batch (a block listed twice).
			ix.counters.duplicates++
			continue
		}
		set := ix.tierSet(i, n, tier, false)
		if set == nil || !set.remove(&ix.bits, s) {
			ix.counters.duplicates++
			continue
		}
		state.held[tier]--
		ix.entries[tier]--
		if tier != kv.TierDevice {
			ix.dropLowerIfEmpty(i, n)
		}
		for level := int(tier); level < ix.levels; level++ {
			if ix.heldAt(i, n, s, level) {
				break // still held at this level through a faster tier, so at every level above too
			}
			if ix.inUnrooted(i, n, s, level) {
				ix.removeUnrooted(i, n, s, level)
			} else {
				ix.unroot(i, s, level)
			}
		}
		ix.maybeDelete(i, ix.at[k])
	}
}
