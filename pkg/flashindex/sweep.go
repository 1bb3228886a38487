package flashindex

// RemoveWorker drops every block of every dp rank of worker.
func (ix *Index) RemoveWorker(worker string) { ix.clearWorker(worker, true) }

// clearWorker retires the worker's slots at once (queries stop seeing them
// immediately) and then sweeps their entries out in bounded chunks, so
// readers never wait behind an O(index) scan.
func (ix *Index) clearWorker(worker string, remove bool) {
	ix.wmu.Lock()
	ws := ix.workers[worker]
	ix.wmu.Unlock()
	if ws == nil {
		// No real entries, but it may have been predicted.
		ix.mu.Lock()
		ix.pred.dropWorker(worker)
		ix.mu.Unlock()
		return
	}
	ws.mu.Lock()
	ix.mu.Lock()
	var retired []slot
	for dp, s := range ws.slots {
		state := &ix.slots[s]
		for t := range state.held {
			ix.entries[t] -= state.held[t]
		}
		state.dead = true
		ix.deadMask[s>>6] |= 1 << (s & 63)
		ix.deadCount++
		retired = append(retired, s)
		delete(ws.slots, dp)
	}
	ix.counters.clears++
	ix.pred.dropWorker(worker)
	ix.mu.Unlock()
	if remove {
		ix.wmu.Lock()
		if ix.workers[worker] == ws {
			delete(ix.workers, worker)
		}
		ix.wmu.Unlock()
		ws.gone = true
	}
	ws.mu.Unlock()
	if len(retired) > 0 {
		ix.sweep(retired)
	}
}

// sweep takes the retired slots out of every node, SweepChunk nodes per hold
// of the write lock, and frees the slots for reuse after the last chunk.
// Between chunks lookups already skip them (deadMask), and events, the
// retired worker's new ones included, go to other slots.
func (ix *Index) sweep(retired []slot) {
	var mask []uint64
	for _, s := range retired {
		for int(s>>6) >= len(mask) {
			mask = append(mask, 0)
		}
		mask[s>>6] |= 1 << (s & 63)
	}
	for start := 0; ; start += ix.cfg.SweepChunk {
		ix.mu.Lock()
		end := min(start+ix.cfg.SweepChunk, ix.slabLen)
		for i := uint32(start); int(i) < end; i++ {
			n := ix.node(i)
			if n.flags()&fUsed == 0 {
				continue
			}
			n.dev.removeMask(&ix.bits, mask)
			if lower := ix.lower(i, n); lower != nil {
				for t := range lower {
					lower[t].removeMask(&ix.bits, mask)
				}
				ix.dropLowerIfEmpty(i, n)
			}
			if unrooted := ix.unrooted(i, n); unrooted != nil {
				for level := range unrooted {
					unrooted[level].removeMask(&ix.bits, mask)
				}
				ix.dropUnrootedIfEmpty(i, n)
			}
			ix.maybeDelete(i, 0) // no hint: the probe starts at home
		}
		done := end >= ix.slabLen
		if done {
			for _, s := range retired {
				ix.slots[s] = slotState{}
				ix.deadMask[s>>6] &^= 1 << (s & 63)
				ix.deadCount--
				ix.freeSlots = append(ix.freeSlots, s)
			}
		}
		ix.mu.Unlock()
		if done {
			return
		}
	}
}
