package enginesim

import (
	"fmt"
	"maps"
	"slices"

	"switchyard.dev/pkg/kv"
)

// tierIndex is the reference model: what an indexer knows from the events
// alone, per tier.
type tierIndex [kv.NumTiers]map[kv.BlockHash]bool

func newTierIndex() *tierIndex {
	var x tierIndex
	for i := range x {
		x[i] = map[kv.BlockHash]bool{}
	}
	return &x
}

func (x *tierIndex) apply(evs []kv.Event) error {
	for _, ev := range evs {
		switch ev.Kind {
		case kv.Stored:
			if len(ev.Blocks) == 0 {
				return fmt.Errorf("empty Stored event")
			}
			for _, h := range ev.Blocks {
				if x[ev.Tier][h] {
					return fmt.Errorf("Stored %x on %v twice", h, ev.Tier)
				}
				x[ev.Tier][h] = true
			}
		case kv.Removed:
			for _, h := range ev.Blocks {
				if !x[ev.Tier][h] {
					return fmt.Errorf("Removed %x from %v but it was not stored", h, ev.Tier)
				}
				delete(x[ev.Tier], h)
			}
		case kv.Cleared:
			for i := range x {
				clear(x[i])
			}
		default:
			return fmt.Errorf("unknown event kind %v", ev.Kind)
		}
	}
	return nil
}

// contents is the engine's real cache, per tier.
func (e *Engine) contents() *tierIndex {
	x := newTierIndex()
	e.pool.byHash.each(func(h kv.BlockHash, _ int32) { x[kv.TierDevice][h] = true })
	for _, s := range []*tierStore{e.host, e.disk} {
		if s != nil {
			s.bySlot.each(func(h kv.BlockHash, _ int32) { x[s.tier][h] = true })
		}
	}
	return x
}

func (x *tierIndex) diff(y *tierIndex) error {
	for t := range x {
		if !maps.Equal(x[t], y[t]) {
			var missing, extra []kv.BlockHash
			for h := range x[t] {
				if !y[t][h] {
					extra = append(extra, h)
				}
			}
			for h := range y[t] {
				if !x[t][h] {
					missing = append(missing, h)
				}
			}
			return fmt.Errorf("tier %v: index has %d extra, %d missing blocks", kv.Tier(t), len(extra), len(missing))
		}
	}
	return nil
}

// checkInvariants verifies the block accounting against a recount from the
// request tables.
func (e *Engine) checkInvariants() error {
	p := e.pool
	n := p.size()
	refs := make([]int32, n)
	live := 0
	for slot := range e.reqs {
		q := &e.reqs[slot]
		if q.state == stateFree {
			if len(q.blocks) != 0 {
				return fmt.Errorf("free slot %d holds %d blocks", slot, len(q.blocks))
			}
			continue
		}
		live++
		if got := e.byID[q.id]; got != int32(slot) {
			return fmt.Errorf("request %q: byID %d, slot %d", q.id, got, slot)
		}
		if want := (q.numComputed + e.cfg.BlockSize - 1) / e.cfg.BlockSize; len(q.blocks) < want {
			return fmt.Errorf("request %q: %d blocks for %d computed tokens", q.id, len(q.blocks), q.numComputed)
		}
		if q.state == stateWaiting && len(q.blocks) != 0 {
			return fmt.Errorf("waiting request %q holds blocks", q.id)
		}
		for i, b := range q.blocks {
			refs[b]++
			if i < int(q.numNamed) && p.blk[b].cached && p.blk[b].hash != q.hashes[i] {
				return fmt.Errorf("request %q block %d: hash mismatch", q.id, i)
			}
		}
	}
	if live != len(e.byID) || live != len(e.running)+len(e.waiting) {
		return fmt.Errorf("%d live requests, %d ids, %d running + %d waiting", live, len(e.byID), len(e.running), len(e.waiting))
	}
	if len(e.running) > e.cfg.MaxNumSeqs {
		return fmt.Errorf("%d running > max_num_seqs", len(e.running))
	}
	used := 0
	for b := range n {
		if refs[b] != p.blk[b].ref {
			return fmt.Errorf("block %d: refcount %d, held by %d requests", b, p.blk[b].ref, refs[b])
		}
		if p.blk[b].ref > 0 {
			used++
			if p.blk[b].inFree {
				return fmt.Errorf("block %d in use and in the free queue", b)
			}
		} else if !p.blk[b].inFree {
			return fmt.Errorf("block %d leaked: unreferenced and not free", b)
		}
		if p.blk[b].cached && p.lookup(p.blk[b].hash) != int32(b) {
			return fmt.Errorf("block %d cached but not indexed", b)
		}
	}
	if used != p.numUsed || used+p.numFree != n {
		return fmt.Errorf("used %d (counter %d) + free %d != %d", used, p.numUsed, p.numFree, n)
	}
	// Walk every queue both ways: the empty queue holds uncached blocks,
	// the cached queue unretained cached ones, the retained queue retained
	// ones; the last two in the order they were freed (the eviction order
	// by last use).
	count := 0
	for _, q := range []int{queueEmpty, queueCached, queueRetained} {
		s := p.sentinelOf(q)
		for b := p.blk[s].next; b != s; b = p.blk[b].next {
			if p.blk[p.blk[b].next].prev != b {
				return fmt.Errorf("free queue broken at %d", b)
			}
			if m := p.blk[b]; (q == queueEmpty) == m.cached || (q == queueRetained) != (m.retainUntil > 0) {
				return fmt.Errorf("block %d in free queue %d: cached %v, retained until %v", b, q, m.cached, m.retainUntil)
			}
			if nx := p.blk[b].next; q != queueEmpty && nx != s && p.blk[nx].freedAt < p.blk[b].freedAt {
				return fmt.Errorf("free queue %d: block %d freed at %d ms before block %d ahead of it (%d ms)", q, nx, p.blk[nx].freedAt, b, p.blk[b].freedAt)
			}
			count++
			if count > n {
				return fmt.Errorf("free queue cycles")
			}
		}
	}
	if count != p.numFree {
		return fmt.Errorf("free queues hold %d, counter %d", count, p.numFree)
	}
	if p.byHash.len() > n {
		return fmt.Errorf("%d cached blocks > %d", p.byHash.len(), n)
	}
	for _, t := range []*tierStore{e.host, e.disk} {
		if t != nil && (t.resident() > t.capacity() || t.resident()+len(t.free) != t.capacity()) {
			return fmt.Errorf("tier %v: %d resident, %d free, capacity %d", t.tier, t.resident(), len(t.free), t.capacity())
		}
	}
	if slices.ContainsFunc(e.running, func(s int32) bool { return e.reqs[s].state != stateRunning }) {
		return fmt.Errorf("running queue holds a non-running request")
	}
	return nil
}
