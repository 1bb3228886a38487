package enginesim

import (
	"cmp"
	"slices"
	"time"

	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
)

// Hint is one soft request to manage KV (dynamo.md §6.3), in the one hint
// vocabulary (hints.Kind). The engine executes Demote (a session's, or the
// listed, idle device blocks to the next tier down instead of letting them
// be dropped later), Prefetch (a session's, or the listed root-first,
// blocks from host or disk into the device ahead of the next turn), Share
// (the listed root-first prefix, held by another worker or a shared tier,
// into the device at transfer cost) and Release (a finished session's idle
// blocks first in the eviction order); HintSupport says which of them this
// engine's tiers allow. A hint is advice: the engine may follow it in part
// or not at all, and no hint changes any output token.
type Hint struct {
	Kind      hints.Kind
	SessionID string         // target session (and the session Stored events name)
	Blocks    []kv.BlockHash // explicit targets; root-first for Prefetch and Share
	MaxBlocks int            // bound on blocks moved; 0 = none
}

// HintSupport is what the engine announces it acts on: Share and Release
// always, Demote and Prefetch when it has a host or disk tier to move
// blocks to and from. No limits: a hint may name any number of blocks.
func (e *Engine) HintSupport() hints.Support {
	s := hints.Support{Known: true}
	for _, k := range []hints.Kind{hints.KindShare, hints.KindPrefetch, hints.KindDemote, hints.KindRelease} {
		if (k == hints.KindPrefetch || k == hints.KindDemote) && e.lowerThan(kv.TierDevice) == nil {
			continue
		}
		s.Caps = append(s.Caps, hints.Capability{Kind: k})
	}
	return s
}

// HintOutcome reports what a hint did. Events are the cache changes it made,
// to publish like a step's. The copy it started occupies its tier's link
// (later loads queue behind it) but not the steps; the model treats the
// copied blocks as usable at once.
type HintOutcome struct {
	Status hints.Result // accepted, clipped, deferred or rejected
	Blocks int          // blocks moved (or reordered, for ReleaseSession)
	Reason string
	Events []kv.Event
}

// Deferred hints wait in a small queue and are retried after steps that
// freed device blocks (a request finished, was preempted or aborted), which
// is what they were waiting for; after deferredTTL steps they are dropped.
const (
	maxDeferredHints = 32
	deferredTTL      = 4096
)

type deferredHint struct {
	h       Hint
	expires int64 // step count
}

// ApplyHint executes one hint. A deferred hint is queued and retried later;
// its eventual changes come out in the events of a Step.
func (e *Engine) ApplyHint(h Hint) HintOutcome {
	o := e.applyHint(h)
	if o.Status == hints.ResultDeferred {
		if len(e.deferred) == maxDeferredHints {
			e.deferred = append(e.deferred[:0], e.deferred[1:]...) // drop the oldest
		}
		e.deferred = append(e.deferred, deferredHint{h: h, expires: e.stats.Steps + deferredTTL})
		e.deferredFree = e.pool.numFree
	}
	o.Events = e.log.take()
	return o
}

// retryDeferred re-applies queued hints if blocks were freed since the last
// attempt. Their events join the current log (the step's).
func (e *Engine) retryDeferred() {
	if len(e.deferred) == 0 {
		return
	}
	if e.pool.numFree <= e.deferredFree {
		e.deferredFree = e.pool.numFree // remember the low point
		return
	}
	kept := e.deferred[:0]
	for _, d := range e.deferred {
		if d.expires < e.stats.Steps {
			continue
		}
		if o := e.applyHint(d.h); o.Status == hints.ResultDeferred {
			kept = append(kept, d)
		} else {
			e.stats.DeferredHintsApplied++
		}
	}
	clear(e.deferred[len(kept):])
	e.deferred = kept
	e.deferredFree = e.pool.numFree
}

func (e *Engine) applyHint(h Hint) HintOutcome {
	var o HintOutcome
	switch h.Kind {
	case hints.KindDemote:
		o = e.hintDemote(h)
	case hints.KindPrefetch:
		o = e.hintPrefetch(h)
	case hints.KindShare:
		o = e.hintShare(h)
	case hints.KindRelease:
		o = e.hintRelease(h)
	default:
		o = HintOutcome{Status: hints.ResultRejected, Reason: "not supported by the simulated engine: " + h.Kind.String()}
	}
	return o
}

func outcome(done, wanted int, clipReason string) HintOutcome {
	switch {
	case done == wanted:
		return HintOutcome{Status: hints.ResultAccepted, Blocks: done}
	default:
		return HintOutcome{Status: hints.ResultClipped, Blocks: done, Reason: clipReason}
	}
}

// deviceTargets lists the device blocks of a session (or holding the
// given hashes), deepest first.
func (e *Engine) deviceTargets(h Hint) []int32 {
	p := e.pool
	var out []int32
	if len(h.Blocks) > 0 {
		for _, x := range h.Blocks {
			if b := p.lookup(x); b != nilBlock {
				out = append(out, b)
			}
		}
	} else if sess, ok := e.sessionIdx[h.SessionID]; ok && h.SessionID != "" {
		for b := range int32(p.size()) {
			if p.blk[b].cached && p.blk[b].session == sess {
				out = append(out, b)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b int32) int { return cmp.Compare(p.blk[b].pos, p.blk[a].pos) })
	return out
}

func (e *Engine) hintDemote(h Hint) HintOutcome {
	lower := e.lowerThan(kv.TierDevice)
	if lower == nil {
		return HintOutcome{Status: hints.ResultRejected, Reason: "no host or disk tier"}
	}
	targets := e.deviceTargets(h)
	if len(targets) == 0 {
		return HintOutcome{Status: hints.ResultRejected, Reason: "no such blocks on the device"}
	}
	moved, inUse := 0, 0
	for _, b := range targets {
		if h.MaxBlocks > 0 && moved == h.MaxBlocks {
			break
		}
		if e.pool.blk[b].ref > 0 {
			inUse++
			continue
		}
		// Deepest first, so that in the lower tier the parents end up more
		// recently used than their children.
		e.pool.unlink(b)
		e.evictDevice(b)
		e.pool.pushFront(b)
		moved++
	}
	if moved == 0 {
		return HintOutcome{Status: hints.ResultDeferred, Reason: "blocks in use by running requests"}
	}
	return outcome(moved, len(targets), "bounded or blocks in use")
}

// loadable is one block a Prefetch or Share wants on the device.
type loadable struct {
	h, parent kv.BlockHash
	pos       int32
	from      kv.Tier // where it is copied from
}

// loadIntoDevice copies blocks (root-first) into free device blocks, as
// cached idle blocks, and books the copy on the source tier's link. It loads at most
// limit blocks (0: no limit), and no more than can be allocated without
// evicting the ones it loads.
func (e *Engine) loadIntoDevice(items []loadable, session int32, limit int) (loaded int) {
	p := e.pool
	// Refresh targets already on the device (deepest first so parents end
	// up more recently used), and keep them out of this load's evictions.
	own, now := 0, msOf(e.clock)
	for i := len(items) - 1; i >= 0; i-- {
		if b := p.lookup(items[i].h); b != nilBlock && p.blk[b].ref == 0 {
			p.unlink(b)
			p.pushBack(b, now)
			own++
		}
	}
	room := p.numFree - own
	if limit > 0 {
		room = min(room, limit)
	}
	sess := e.sessions[session]
	var blocks []int32
	var tiers []kv.Tier // where each of blocks is copied from
	var per [kv.NumTiers]int
	for _, it := range items {
		if p.lookup(it.h) != nilBlock {
			continue
		}
		if len(blocks) == room {
			break
		}
		if s := e.tierStore(it.from); s != nil {
			s.touch(it.h)
		}
		b := e.allocBlock()
		p.cache(b, it.h, it.parent, it.pos, session)
		e.log.stored(kv.TierDevice, it.parent, it.h, sess)
		blocks = append(blocks, b)
		tiers = append(tiers, it.from)
		per[it.from]++
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		p.release(blocks[i], now)
	}
	var lands [kv.NumTiers]time.Duration
	for t, n := range per {
		if n > 0 {
			from := kv.Tier(t)
			if from == kv.TierShared || from == kv.TierDevice {
				from = kv.TierHost // network and peer copies at the transfer bandwidth
			}
			lands[t] = e.book(from, n)
		}
	}
	// A request that finds these blocks before their copy is done waits
	// for it (admit).
	for i, b := range blocks {
		p.blk[b].landsAt = lands[tiers[i]]
	}
	e.stats.LoadedBlocks += int64(len(blocks))
	return len(blocks)
}

func (e *Engine) hintPrefetch(h Hint) HintOutcome {
	if e.host == nil && e.disk == nil {
		return HintOutcome{Status: hints.ResultRejected, Reason: "no host or disk tier"}
	}
	var items []loadable
	if len(h.Blocks) > 0 {
		var parent kv.BlockHash
		for i, x := range h.Blocks {
			from, ok := e.residentTier(x)
			if !ok {
				break // a prefix hit stops at the first missing block
			}
			items = append(items, loadable{h: x, parent: parent, pos: int32(i), from: from})
			parent = x
		}
	} else if sess, ok := e.sessionIdx[h.SessionID]; ok && h.SessionID != "" {
		for _, s := range []*tierStore{e.host, e.disk} {
			if s == nil {
				continue
			}
			s.bySlot.each(func(x kv.BlockHash, i int32) {
				if s.session[i] == sess && e.pool.lookup(x) == nilBlock && !slices.ContainsFunc(items, func(l loadable) bool { return l.h == x }) {
					items = append(items, loadable{h: x, parent: s.parent[i], pos: s.pos[i], from: s.tier})
				}
			})
		}
		slices.SortFunc(items, func(a, b loadable) int {
			if c := cmp.Compare(a.pos, b.pos); c != 0 {
				return c
			}
			return cmp.Compare(a.h, b.h)
		})
	}
	if len(items) == 0 {
		return HintOutcome{Status: hints.ResultRejected, Reason: "no such blocks on host or disk"}
	}
	return e.finishLoad(h, items)
}

func (e *Engine) finishLoad(h Hint, items []loadable) HintOutcome {
	want := 0
	for _, it := range items {
		if e.pool.lookup(it.h) == nilBlock {
			want++
		}
	}
	if want == 0 {
		e.loadIntoDevice(items, e.internSession(h.SessionID), 0) // refresh only
		return HintOutcome{Status: hints.ResultAccepted, Reason: "already on the device"}
	}
	if e.pool.numFree == 0 {
		return HintOutcome{Status: hints.ResultDeferred, Reason: "no free device blocks"}
	}
	n := e.loadIntoDevice(items, e.internSession(h.SessionID), h.MaxBlocks)
	if n == 0 {
		return HintOutcome{Status: hints.ResultDeferred, Reason: "no free device blocks"}
	}
	return outcome(n, want, "bounded or device full")
}

// residentTier says where a block can be loaded from.
func (e *Engine) residentTier(x kv.BlockHash) (kv.Tier, bool) {
	switch {
	case e.pool.lookup(x) != nilBlock:
		return kv.TierDevice, true
	case e.host.has(x):
		return kv.TierHost, true
	case e.disk.has(x):
		return kv.TierDisk, true
	}
	return 0, false
}

func (e *Engine) hintShare(h Hint) HintOutcome {
	if len(h.Blocks) == 0 {
		return HintOutcome{Status: hints.ResultRejected, Reason: "share needs the prefix's block hashes"}
	}
	items := make([]loadable, len(h.Blocks))
	var parent kv.BlockHash
	for i, x := range h.Blocks {
		from, ok := e.residentTier(x)
		if !ok {
			from = kv.TierShared // another worker or the shared pool
		}
		items[i] = loadable{h: x, parent: parent, pos: int32(i), from: from}
		parent = x
	}
	return e.finishLoad(h, items)
}

func (e *Engine) hintRelease(h Hint) HintOutcome {
	if h.SessionID == "" && len(h.Blocks) == 0 {
		return HintOutcome{Status: hints.ResultRejected, Reason: "no session"}
	}
	targets := e.deviceTargets(h)
	if len(targets) == 0 {
		return HintOutcome{Status: hints.ResultRejected, Reason: "no blocks of the session on the device"}
	}
	// targets are deepest first; pushing each to the front in reverse leaves
	// the deepest at the very front: evicted first, leaves before parents.
	moved := 0
	for i := len(targets) - 1; i >= 0; i-- {
		b := targets[i]
		if e.pool.blk[b].ref > 0 {
			continue
		}
		e.pool.unlink(b)
		e.pool.pushFront(b)
		moved++
	}
	if moved == 0 {
		return HintOutcome{Status: hints.ResultDeferred, Reason: "blocks in use by running requests"}
	}
	return outcome(moved, len(targets), "blocks in use")
}
