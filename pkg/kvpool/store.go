package kvpool

import (
	"fmt"

	"switchyard.dev/pkg/kv"
)

// Config configures a Store.
type Config struct {
	Layout Layout
	// Capacity is how many objects the store holds. Size it in pages with
	// pages × Layout.ObjectsPerPage(); any other figure leaves room for part
	// of a page, as a byte-sized Mooncake segment does.
	Capacity int
	// Epoch names this incarnation of the store; its event stream restarts
	// at sequence 1 in every epoch, so a follower that sees a new epoch must
	// start over. 0 = 1.
	Epoch uint64
}

// Event is one change to the store: an object became present (kv.Stored)
// or went away (kv.Removed). Seq numbers the events of an epoch 1, 2, 3, …
// with no gaps.
type Event struct {
	Seq    uint64
	Kind   kv.EventKind
	Object Object
}

// Stats are a store's counters and gauges.
type Stats struct {
	Capacity      int   // objects
	Objects       int   // objects present
	CompletePages int   // pages with every object present
	PagesPut      int64 // pages offered to Put
	ObjectsStored int64 // objects newly stored (by Put or PutObjects)
	PagesAsked    int64 // pages asked for by Get
	PagesHit      int64 // of which returned (complete, in the leading run)
	Evictions     int64 // objects evicted to make room
	Removed       int64 // objects removed by Remove
}

// Store is the simulated shared pool. The zero value is not usable; call New.
type Store struct {
	layout   Layout
	opp      int // objects per page
	epoch    uint64
	seq      uint64
	capacity int

	// Objects live in slots; prev/next link them in LRU order through the
	// sentinel slot `capacity` (next of the sentinel = least recently used).
	obj        []Object
	prev, next []int32
	free       []int32
	bySlot     map[Object]int32
	present    map[kv.BlockHash]uint16 // page → objects present
	complete   int                     // pages with every object present

	events  []Event
	scratch []Object
	stats   Stats
}

// New builds an empty store.
func New(cfg Config) (*Store, error) {
	if err := cfg.Layout.Validate(); err != nil {
		return nil, err
	}
	if cfg.Capacity < 1 || cfg.Capacity >= 1<<30 {
		return nil, fmt.Errorf("kvpool: capacity %d objects out of range (1..2^30)", cfg.Capacity)
	}
	if cfg.Epoch == 0 {
		cfg.Epoch = 1
	}
	n := cfg.Capacity
	s := &Store{
		layout:   cfg.Layout.withDefaults(),
		opp:      cfg.Layout.ObjectsPerPage(),
		epoch:    cfg.Epoch,
		capacity: n,
		obj:      make([]Object, n),
		prev:     make([]int32, n+1),
		next:     make([]int32, n+1),
		free:     make([]int32, 0, n),
		bySlot:   make(map[Object]int32, n),
		present:  make(map[kv.BlockHash]uint16),
	}
	s.prev[n], s.next[n] = int32(n), int32(n)
	for i := n - 1; i >= 0; i-- {
		s.free = append(s.free, int32(i))
	}
	return s, nil
}

// Layout is the store's object layout (defaults filled in).
func (s *Store) Layout() Layout { return s.layout }

// Epoch is the store's incarnation (see Config.Epoch).
func (s *Store) Epoch() uint64 { return s.epoch }

// Seq is the sequence number of the last event published (0: none yet).
func (s *Store) Seq() uint64 { return s.seq }

func (s *Store) link(i int32) { // as most recently used
	n := int32(s.capacity)
	last := s.prev[n]
	s.prev[i], s.next[i] = last, n
	s.next[last] = i
	s.prev[n] = i
}

func (s *Store) unlink(i int32) {
	s.next[s.prev[i]] = s.next[i]
	s.prev[s.next[i]] = s.prev[i]
}

func (s *Store) publish(k kv.EventKind, o Object) {
	s.seq++
	s.events = append(s.events, Event{Seq: s.seq, Kind: k, Object: o})
}

// drop removes the object in slot i and publishes its removal.
func (s *Store) drop(i int32) {
	o := s.obj[i]
	s.unlink(i)
	delete(s.bySlot, o)
	s.free = append(s.free, i)
	if int(s.present[o.Page]) == s.opp {
		s.complete--
	}
	if c := s.present[o.Page] - 1; c == 0 {
		delete(s.present, o.Page)
	} else {
		s.present[o.Page] = c
	}
	s.publish(kv.Removed, o)
}

// put stores one object, or marks it most recently used when present.
func (s *Store) put(o Object) {
	if i, ok := s.bySlot[o]; ok {
		s.unlink(i)
		s.link(i)
		return
	}
	if len(s.free) == 0 {
		s.drop(s.next[s.capacity]) // least recently used
		s.stats.Evictions++
	}
	i := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.obj[i] = o
	s.bySlot[o] = i
	s.link(i)
	s.present[o.Page]++
	if int(s.present[o.Page]) == s.opp {
		s.complete++
	}
	s.stats.ObjectsStored++
	s.publish(kv.Stored, o)
}

// Put writes every object of page h (rank by rank, keys before values),
// evicting least recently used objects as needed. Objects already present
// are only refreshed. A store smaller than one page keeps only its last
// objects: the page is then partial.
func (s *Store) Put(h kv.BlockHash) {
	s.stats.PagesPut++
	s.scratch = s.layout.Objects(s.scratch[:0], h)
	for _, o := range s.scratch {
		s.put(o)
	}
}

// PutObjects writes some objects, as one rank's writer does on its own. It
// rejects objects outside the layout without storing any.
func (s *Store) PutObjects(objs ...Object) error {
	for _, o := range objs {
		if !s.layout.Contains(o) {
			return fmt.Errorf("kvpool: object %s outside the layout (TP size %d)", s.layout.Key(o), s.layout.TPSize)
		}
	}
	for _, o := range objs {
		s.put(o)
	}
	return nil
}

// Contains reports whether page h is complete (every object present),
// without touching it.
func (s *Store) Contains(h kv.BlockHash) bool { return int(s.present[h]) == s.opp }

// Get reads the leading complete pages of pages (a prompt's prefix, root
// first), marking their objects most recently used, and returns how many it
// read. It stops at the first page that is absent or partial.
func (s *Store) Get(pages []kv.BlockHash) int {
	n := 0
	for _, h := range pages {
		if !s.Contains(h) {
			break
		}
		s.scratch = s.layout.Objects(s.scratch[:0], h)
		for _, o := range s.scratch {
			i := s.bySlot[o]
			s.unlink(i)
			s.link(i)
		}
		n++
	}
	s.stats.PagesAsked += int64(len(pages))
	s.stats.PagesHit += int64(n)
	return n
}

// Remove deletes one object; it reports whether it was present.
func (s *Store) Remove(o Object) bool {
	i, ok := s.bySlot[o]
	if !ok {
		return false
	}
	s.drop(i)
	s.stats.Removed++
	return true
}

// TakeEvents returns the events published since the last call, in sequence
// order, and forgets them. The slice is the caller's.
func (s *Store) TakeEvents() []Event {
	ev := s.events
	s.events = nil
	return ev
}

// Objects lists every present object from least to most recently used: a
// snapshot a follower can rebuild its view from (as of Seq).
func (s *Store) Objects() []Object {
	out := make([]Object, 0, len(s.bySlot))
	n := int32(s.capacity)
	for i := s.next[n]; i != n; i = s.next[i] {
		out = append(out, s.obj[i])
	}
	return out
}

// Stats returns the store's counters and gauges.
func (s *Store) Stats() Stats {
	st := s.stats
	st.Capacity = s.capacity
	st.Objects = len(s.bySlot)
	st.CompletePages = s.complete
	return st
}
