package flashindex

import (
	"fmt"
	"sync"
	"sync/atomic"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
)

// PoolIndex is the shared-pool index (dynamo.md §5): which pages a
// Mooncake-like shared KV pool holds, built only from the pool's own event
// stream. The pool stores objects — one per tensor-parallel rank for keys and
// one for values of each page — and this index counts a page as a hit only
// when every one of its objects is present, since an engine cannot use part
// of a page.
//
// The stream is trusted only while it is contiguous: a gap in its sequence
// numbers (a lost event), a new epoch (the pool restarted) or more objects
// than MaxObjects clears the index, which then under-reports until the pool
// stores the objects again or the follower loads a snapshot. Under-reporting
// costs a cache miss; trusting a stream with holes would route turns to
// workers for pages that are gone.
//
// It is safe for concurrent use; Apply calls must come from one follower in
// stream order.
type PoolIndex struct {
	layout     kvpool.Layout
	opp        uint16
	maxObjects int

	mu       sync.RWMutex
	epoch    uint64
	seq      uint64 // last event applied
	objects  map[kvpool.Object]struct{}
	count    map[kv.BlockHash]uint16 // page → objects present
	complete int                     // pages with every object present
	stats    PoolStats
}

// PoolStats are the shared-pool index's counters and gauges.
type PoolStats struct {
	Epoch, Seq    uint64
	Objects       int    // objects present
	CompletePages int    // pages that count as hits
	Events        uint64 // events applied
	Duplicates    uint64 // events at or below the last sequence number, ignored
	Gaps          uint64 // sequence gaps, each of which cleared the index
	Epochs        uint64 // epoch changes (pool restarts), each clearing it
	Overflows     uint64 // clears because MaxObjects was reached
	BadEvents     uint64 // events for objects outside the layout, ignored
}

// DefaultPoolMaxObjects bounds a PoolIndex unless told otherwise: Dynamo's
// shared-cache indexer clears itself at a million entries.
const DefaultPoolMaxObjects = 1_000_000

// NewPoolIndex returns an empty index for a pool with the given layout;
// maxObjects ≤ 0 means DefaultPoolMaxObjects.
func NewPoolIndex(layout kvpool.Layout, maxObjects int) (*PoolIndex, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if maxObjects <= 0 {
		maxObjects = DefaultPoolMaxObjects
	}
	return &PoolIndex{
		layout: layout, opp: uint16(layout.ObjectsPerPage()), maxObjects: maxObjects,
		objects: make(map[kvpool.Object]struct{}), count: make(map[kv.BlockHash]uint16),
	}, nil
}

// Layout is the pool layout the index expects.
func (p *PoolIndex) Layout() kvpool.Layout { return p.layout }

func (p *PoolIndex) clearLocked() {
	clear(p.objects)
	clear(p.count)
	p.complete = 0
}

// Apply applies a batch of the pool's events of the given epoch, in order.
// It reports whether the index had to clear itself (new epoch, gap,
// overflow), so that a follower can resynchronise from a snapshot.
func (p *PoolIndex) Apply(epoch uint64, evs []kvpool.Event) (cleared bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch != p.epoch {
		if p.epoch != 0 {
			p.stats.Epochs++
			cleared = true
		}
		p.clearLocked()
		p.epoch, p.seq = epoch, 0
	}
	for i := range evs {
		ev := &evs[i]
		switch {
		case ev.Seq <= p.seq:
			p.stats.Duplicates++
			continue
		case ev.Seq != p.seq+1:
			p.stats.Gaps++
			p.clearLocked()
			cleared = true
		}
		p.seq = ev.Seq
		if !p.layout.Contains(ev.Object) {
			p.stats.BadEvents++
			continue
		}
		p.stats.Events++
		switch ev.Kind {
		case kv.Stored:
			p.storeLocked(ev.Object)
		case kv.Removed:
			p.removeLocked(ev.Object)
		default:
			p.stats.BadEvents++
		}
		if len(p.objects) > p.maxObjects {
			p.stats.Overflows++
			p.clearLocked()
			cleared = true
		}
	}
	return cleared
}

func (p *PoolIndex) storeLocked(o kvpool.Object) {
	if _, ok := p.objects[o]; ok {
		return
	}
	p.objects[o] = struct{}{}
	c := p.count[o.Page] + 1
	p.count[o.Page] = c
	if c == p.opp {
		p.complete++
	}
}

func (p *PoolIndex) removeLocked(o kvpool.Object) {
	if _, ok := p.objects[o]; !ok {
		return
	}
	delete(p.objects, o)
	c := p.count[o.Page]
	if c == p.opp {
		p.complete--
	}
	if c == 1 {
		delete(p.count, o.Page)
	} else {
		p.count[o.Page] = c - 1
	}
}

// Load replaces the index with a snapshot of the pool: the objects present
// as of sequence seq of epoch (kvpool.Store.Objects and Seq). It rejects
// objects outside the layout.
func (p *PoolIndex) Load(epoch, seq uint64, objs []kvpool.Object) error {
	for _, o := range objs {
		if !p.layout.Contains(o) {
			return fmt.Errorf("flashindex: pool snapshot object %s outside the layout", p.layout.Key(o))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	p.epoch, p.seq = epoch, seq
	for _, o := range objs {
		p.storeLocked(o)
	}
	return nil
}

// Position is the epoch and last sequence number applied: where a follower
// resumes the stream.
func (p *PoolIndex) Position() (epoch, seq uint64) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.epoch, p.seq
}

// Has reports whether page h counts as a hit (every object present).
func (p *PoolIndex) Has(h kv.BlockHash) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.count[h] == p.opp
}

// Stats returns the index's counters and gauges.
func (p *PoolIndex) Stats() PoolStats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	s := p.stats
	s.Epoch, s.Seq = p.epoch, p.seq
	s.Objects, s.CompletePages = len(p.objects), p.complete
	return s
}

// poolRef is how an Index finds its shared-pool index.
type poolRef = atomic.Pointer[PoolIndex]

// AttachPool makes FindMatches extend every worker's overlap with the pages
// the shared pool holds (nil detaches it).
func (ix *Index) AttachPool(p *PoolIndex) { ix.pool.Store(p) }

// addPool extends m with the attached shared pool, if any and not stale
// (FindOptions.PoolStale). Needs ix.mu held for reading.
func (ix *Index) addPool(m *Matches, hashes []kv.BlockHash, stale bool) {
	m.PoolPrefix = 0
	if p := ix.pool.Load(); p != nil && !stale {
		ix.extendWithPool(p, m, hashes)
	}
}

// extendWithPool (ix.mu held for reading, then p.mu) adds, for every worker, the blocks after its own prefix
// (all its tiers) that it can load from the shared pool, to
// WorkerMatch.Shared. Any worker can read the pool, so a worker with no
// blocks of the prompt at all gets an entry when the pool holds the
// prompt's first pages. Past a pool page, the worker's own blocks count
// again: an engine loads each block of its prefix from wherever it is, so
// the extension is the longest prefix on own-tiers-or-pool minus the
// worker's own depth.
func (ix *Index) extendWithPool(p *PoolIndex, m *Matches, hashes []kv.BlockHash) {
	D := len(hashes)
	p.mu.RLock()
	defer p.mu.RUnlock()
	if D == 0 || p.complete == 0 {
		return
	}
	// runEnd[q] memoises where the pool's run of complete pages starting at
	// q ends (0 = not computed yet; the end is always > q when the page is
	// there, and q itself, stored as q+1, when it is not).
	runEnd := make([]int32, D)
	end := func(q int) int {
		if q >= D {
			return q
		}
		if e := runEnd[q]; e != 0 {
			return int(e) - 1
		}
		r := q
		for r < D && p.count[hashes[r]] == p.opp {
			r++
		}
		for k := q; k < r; k++ {
			runEnd[k] = int32(r) + 1
		}
		if r == q {
			runEnd[q] = int32(q) + 1
		}
		return r
	}
	m.PoolPrefix = end(0)
	type key struct {
		worker string
		dp     uint32
	}
	at := make(map[key]int, len(m.Workers))
	for j, w := range m.Workers {
		at[key{w.Worker, w.DPRank}] = j
	}
	for si := range ix.slots {
		st := &ix.slots[si]
		if !st.used || st.dead {
			continue
		}
		j, known := at[key{st.worker, st.dp}]
		own := 0
		if known {
			w := &m.Workers[j]
			own = w.Device + w.Host + w.Disk + w.Shared
		}
		depth := own
		for {
			q := end(depth)
			if q == depth {
				break
			}
			depth = q
			for depth < D && ix.holds(slot(si), hashes[depth]) {
				depth++
			}
		}
		if depth == own {
			continue
		}
		if !known {
			m.Workers = append(m.Workers, WorkerMatch{Worker: st.worker, DPRank: st.dp})
			j = len(m.Workers) - 1
		}
		m.Workers[j].Shared += depth - own
	}
}

// holds reports whether slot s holds block h on any of its own tiers.
func (ix *Index) holds(s slot, h kv.BlockHash) bool {
	i, ok := ix.ids.get(h)
	if !ok {
		return false
	}
	return ix.minTier(i, ix.node(i), s) < kv.NumTiers
}
