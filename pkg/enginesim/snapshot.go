package enginesim

import (
	"cmp"
	"slices"

	"switchyard.dev/pkg/kv"
)

// Reset drops every cached block on every tier and returns the Cleared
// event. Like vLLM's reset_prefix_cache it refuses while requests are in
// flight (ErrBusy), since their blocks cannot be forgotten under them.
func (e *Engine) Reset() ([]kv.Event, error) {
	if e.HasWork() {
		return nil, ErrBusy
	}
	e.pool = newBlockPool(e.cfg.NumGPUBlocks)
	for _, t := range []*tierStore{e.host, e.disk} {
		if t != nil {
			t.clear()
		}
	}
	e.deferred = e.deferred[:0]
	e.log.cleared()
	return e.log.take(), nil
}

// Snapshot returns Stored events that describe the whole cache, tier by
// tier: applying them to an empty index yields the engine's current
// contents (for a subscriber resynchronizing). Each tier is walked depth
// first from its roots, so parents come before children and every chain
// becomes one event.
func (e *Engine) Snapshot() []kv.Event {
	var l eventLog
	p := e.pool
	dev := make([]snapEntry, 0, p.byHash.len())
	p.byHash.each(func(_ kv.BlockHash, b int32) {
		m := &p.blk[b]
		dev = append(dev, snapEntry{m.hash, m.parent, m.session})
	})
	e.snapshotTier(&l, kv.TierDevice, dev)
	for _, t := range []*tierStore{e.host, e.disk} {
		if t == nil {
			continue
		}
		es := make([]snapEntry, 0, t.resident())
		t.bySlot.each(func(_ kv.BlockHash, i int32) {
			es = append(es, snapEntry{t.hash[i], t.parent[i], t.session[i]})
		})
		e.snapshotTier(&l, t.tier, es)
	}
	return l.take() // capacity clipped: the rest of the chunk stays unshared
}

type snapEntry struct {
	h, parent kv.BlockHash
	sess      int32
}

func (e *Engine) snapshotTier(l *eventLog, t kv.Tier, es []snapEntry) {
	// Sorted by (parent, hash): each block's children form one run, and the
	// order is deterministic.
	slices.SortFunc(es, func(a, b snapEntry) int {
		if c := cmp.Compare(a.parent, b.parent); c != 0 {
			return c
		}
		return cmp.Compare(a.h, b.h)
	})
	present := make(map[kv.BlockHash]bool, len(es))
	for _, x := range es {
		present[x.h] = true
	}
	children := func(h kv.BlockHash) []snapEntry {
		i, _ := slices.BinarySearchFunc(es, h, func(x snapEntry, h kv.BlockHash) int { return cmp.Compare(x.parent, h) })
		j := i
		for j < len(es) && es[j].parent == h {
			j++
		}
		return es[i:j]
	}
	var stack []snapEntry
	for _, root := range es {
		if root.parent != 0 && present[root.parent] {
			continue // reached from its parent
		}
		stack = append(stack[:0], root)
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			l.stored(t, x.parent, x.h, e.sessions[x.sess])
			kids := children(x.h)
			for i := len(kids) - 1; i >= 0; i-- { // first child next: it extends this event
				stack = append(stack, kids[i])
			}
		}
	}
}
