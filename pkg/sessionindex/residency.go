package sessionindex

import (
	"errors"
	"slices"
	"time"

	"switchyard.dev/pkg/kv"
)

// Residency tracks, per worker, on which tiers each block currently is, only
// so that a session's frontier recedes when a block has left the worker
// altogether — not when it is merely demoted from GPU to host, which is
// exactly when a hint needs the lineage most. It is not an index of
// residency for routing (that is the flash indexer's job).
//
// It also remembers each resident block's parent, whichever request stored
// it: a session's first Stored event often extends a prefix that a request
// without a session id computed (a warm-up, a client sending no session
// header), and that prefix is the session's lineage too.
type Residency struct {
	workers map[string]map[kv.BlockHash]resident
}

type resident struct {
	tiers  uint8 // bit i = on kv.Tier(i)
	parent kv.BlockHash
}

// NewResidency returns an empty tracker.
func NewResidency() Residency {
	return Residency{workers: make(map[string]map[kv.BlockHash]resident)}
}

func tierBit(t kv.Tier) uint8 {
	if !t.Valid() {
		t = kv.TierDevice
	}
	return 1 << t
}

// Stored marks blocks (root-first, the first extending parent) resident on
// tier.
func (r Residency) Stored(worker string, t kv.Tier, parent kv.BlockHash, blocks []kv.BlockHash) {
	m := r.workers[worker]
	if m == nil {
		m = make(map[kv.BlockHash]resident)
		r.workers[worker] = m
	}
	for _, h := range blocks {
		e := m[h]
		e.tiers |= tierBit(t)
		e.parent = parent
		m[h] = e
		parent = h
	}
}

// Removed unmarks blocks on tier and returns those now on no tier. A block
// never seen stored counts as gone.
func (r Residency) Removed(worker string, t kv.Tier, blocks []kv.BlockHash) []kv.BlockHash {
	m := r.workers[worker]
	var gone []kv.BlockHash
	for _, h := range blocks {
		e := m[h]
		e.tiers &^= tierBit(t)
		if e.tiers == 0 {
			delete(m, h)
			gone = append(gone, h)
		} else {
			m[h] = e
		}
	}
	return gone
}

// Has reports whether block is on some tier of worker.
func (r Residency) Has(worker string, block kv.BlockHash) bool {
	_, ok := r.workers[worker][block]
	return ok
}

// Clear forgets the worker.
func (r Residency) Clear(worker string) { delete(r.workers, worker) }

// Blocks is how many distinct blocks the worker holds.
func (r Residency) Blocks(worker string) int { return len(r.workers[worker]) }

// Replace sets the worker's contents to the Stored events of a snapshot and
// returns the blocks that were resident before but are not any more.
func (r Residency) Replace(worker string, snapshot []kv.Event) []kv.BlockHash {
	old := r.workers[worker]
	delete(r.workers, worker)
	for _, ev := range snapshot {
		if ev.Kind == kv.Stored {
			r.Stored(worker, ev.Tier, ev.Parent, ev.Blocks)
		}
	}
	now := r.workers[worker]
	var gone []kv.BlockHash
	for h := range old {
		if _, ok := now[h]; !ok {
			gone = append(gone, h)
		}
	}
	return gone
}

// Apply feeds one KV event of worker into the index: residency always, and
// lineage when a Stored event carries a session id. A refused lineage update
// is returned (as *UpdateError) after residency was updated: the physical
// facts stand even when the lineage claim does not.
func (x *Index) Apply(worker string, ev kv.Event, now time.Time) error {
	switch ev.Kind {
	case kv.Stored:
		x.residency.Stored(worker, ev.Tier, ev.Parent, ev.Blocks)
		if ev.SessionID != "" && len(ev.Blocks) > 0 {
			parent, blocks := x.reconnect(worker, ev.Parent, ev.Blocks)
			return x.UpdateFromStored(ev.SessionID, worker, parent, blocks, now)
		}
	case kv.Removed:
		if gone := x.residency.Removed(worker, ev.Tier, ev.Blocks); len(gone) > 0 {
			x.Remove(worker, gone)
		}
	case kv.Cleared:
		x.ClearWorker(worker)
	}
	return nil
}

// Resync replaces what the index believes about worker's contents with a
// snapshot (Stored events) after a gap in its event stream: frontiers on
// blocks that vanished meanwhile recede, and the snapshot's session-tagged
// events are applied as updates. Lineage of other blocks is kept. It
// returns the refused updates, joined.
func (x *Index) Resync(worker string, snapshot []kv.Event, now time.Time) error {
	if gone := x.residency.Replace(worker, snapshot); len(gone) > 0 {
		x.Remove(worker, gone)
	}
	var errs []error
	for _, ev := range snapshot {
		if ev.Kind == kv.Stored && ev.SessionID != "" && len(ev.Blocks) > 0 {
			parent, blocks := x.reconnect(worker, ev.Parent, ev.Blocks)
			if err := x.UpdateFromStored(ev.SessionID, worker, parent, blocks, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ResidentBlocks is how many distinct blocks the index believes worker holds.
func (x *Index) ResidentBlocks(worker string) int { return x.residency.Blocks(worker) }

// reconnect extends an update whose parent the forest does not know with
// the resident ancestors the worker reported without a session id, up to a
// block the forest knows or a root, so that the session's lineage includes
// the prefix it reused. When the ancestry is not fully known the update is
// returned unchanged (and will be refused as an unknown parent).
func (x *Index) reconnect(worker string, parent kv.BlockHash, blocks []kv.BlockHash) (kv.BlockHash, []kv.BlockHash) {
	if parent == 0 || x.lookup(parent) != 0 {
		return parent, blocks
	}
	m := x.residency.workers[worker]
	var path []kv.BlockHash
	h := parent
	for h != 0 && x.lookup(h) == 0 {
		e, ok := m[h]
		if !ok || len(path) > len(m) { // unknown, or a malformed loop
			return parent, blocks
		}
		path = append(path, h)
		h = e.parent
	}
	slices.Reverse(path)
	return h, append(path, blocks...)
}
