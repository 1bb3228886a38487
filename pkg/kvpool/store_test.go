package kvpool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
)

// refStore is the reference model: the objects in a plain slice, least
// recently used first, every operation a linear scan.
type refStore struct {
	layout Layout
	cap    int
	lru    []Object
}

func (r *refStore) index(o Object) int { return slices.Index(r.lru, o) }

func (r *refStore) put(o Object) (evicted []Object, stored bool) {
	if i := r.index(o); i >= 0 {
		r.lru = append(slices.Delete(r.lru, i, i+1), o)
		return nil, false
	}
	if len(r.lru) == r.cap {
		evicted = append(evicted, r.lru[0])
		r.lru = r.lru[1:]
	}
	r.lru = append(r.lru, o)
	return evicted, true
}

func (r *refStore) complete(h kv.BlockHash) bool {
	for _, o := range r.layout.Objects(nil, h) {
		if r.index(o) < 0 {
			return false
		}
	}
	return true
}

func (r *refStore) get(pages []kv.BlockHash) int {
	n := 0
	for _, h := range pages {
		if !r.complete(h) {
			break
		}
		for _, o := range r.layout.Objects(nil, h) {
			r.put(o)
		}
		n++
	}
	return n
}

// TestStoreMatchesReference drives a store and the reference model with the
// same random operations — whole-page puts, partial puts, gets of prefixes,
// removals — on capacities that are and are not a whole number of pages,
// and checks after every operation that contents, LRU order, completeness,
// Get answers and the event stream agree.
func TestStoreMatchesReference(t *testing.T) {
	for _, tc := range []struct{ tp, capacity int }{{1, 8}, {2, 12}, {2, 13}, {4, 9}, {4, 3}, {1, 1}} {
		t.Run(fmt.Sprintf("tp%d_cap%d", tc.tp, tc.capacity), func(t *testing.T) {
			for seed := range uint64(20) {
				runReference(t, tc.tp, tc.capacity, seed)
			}
		})
	}
}

func runReference(t *testing.T, tp, capacity int, seed uint64) {
	t.Helper()
	layout := Layout{TPSize: tp}
	s, err := New(Config{Layout: layout, Capacity: capacity, Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	ref := &refStore{layout: layout, cap: capacity}
	rng := rand.New(rand.NewPCG(seed, 99))
	page := func() kv.BlockHash { return kv.BlockHash(1 + rng.IntN(8)) }
	// view is the set of objects the event stream says are present.
	view := map[Object]bool{}
	var lastSeq uint64
	for step := range 300 {
		var wantEvents []Event
		emit := func(k kv.EventKind, o Object) {
			wantEvents = append(wantEvents, Event{Kind: k, Object: o})
		}
		refPut := func(o Object) {
			ev, stored := ref.put(o)
			for _, x := range ev {
				emit(kv.Removed, x)
			}
			if stored {
				emit(kv.Stored, o)
			}
		}
		switch op := rng.IntN(10); {
		case op < 4:
			h := page()
			s.Put(h)
			for _, o := range layout.Objects(nil, h) {
				refPut(o)
			}
		case op < 6:
			o := Object{Page: page(), Rank: uint16(rng.IntN(tp)), Part: Part(rng.IntN(2))}
			if err := s.PutObjects(o); err != nil {
				t.Fatal(err)
			}
			refPut(o)
		case op < 9:
			pages := []kv.BlockHash{page(), page(), page()}
			got, want := s.Get(pages), ref.get(pages)
			if got != want {
				t.Fatalf("seed %d step %d: Get(%v) = %d, reference %d", seed, step, pages, got, want)
			}
		default:
			o := Object{Page: page(), Rank: uint16(rng.IntN(tp)), Part: Part(rng.IntN(2))}
			had := ref.index(o) >= 0
			if had {
				ref.lru = slices.Delete(ref.lru, ref.index(o), ref.index(o)+1)
				emit(kv.Removed, o)
			}
			if got := s.Remove(o); got != had {
				t.Fatalf("seed %d step %d: Remove = %v, want %v", seed, step, got, had)
			}
		}
		evs := s.TakeEvents()
		for i := range evs {
			if evs[i].Seq != lastSeq+1 {
				t.Fatalf("seed %d step %d: seq %d after %d", seed, step, evs[i].Seq, lastSeq)
			}
			lastSeq = evs[i].Seq
			wantEvents[i].Seq = evs[i].Seq
			view[evs[i].Object] = evs[i].Kind == kv.Stored
			if !view[evs[i].Object] {
				delete(view, evs[i].Object)
			}
		}
		if d := cmp.Diff(wantEvents, evs); d != "" {
			t.Fatalf("seed %d step %d: events (-ref +store):\n%s", seed, step, d)
		}
		if got := s.Objects(); !slices.Equal(ref.lru, got) {
			t.Fatalf("seed %d step %d: LRU order %v, reference %v", seed, step, got, ref.lru)
		}
		if len(view) != len(ref.lru) {
			t.Fatalf("seed %d step %d: events describe %d objects, store holds %d", seed, step, len(view), len(ref.lru))
		}
		complete := 0
		for h := kv.BlockHash(1); h <= 8; h++ {
			want := ref.complete(h)
			if s.Contains(h) != want {
				t.Fatalf("seed %d step %d: Contains(%d) = %v, want %v", seed, step, h, !want, want)
			}
			if want {
				complete++
			}
		}
		if st := s.Stats(); st.Objects != len(ref.lru) || st.CompletePages != complete {
			t.Fatalf("seed %d step %d: stats %+v, want %d objects, %d complete pages", seed, step, st, len(ref.lru), complete)
		}
	}
}

// A page evicted in part stops being a hit at once, although most of its
// objects are still there.
func TestPartialPageIsAMiss(t *testing.T) {
	s, _ := New(Config{Layout: Layout{TPSize: 2}, Capacity: 6}) // one and a half pages
	s.Put(1)
	s.Put(2) // evicts page 1's rank 0 K and V
	if s.Contains(1) || !s.Contains(2) {
		t.Fatalf("Contains(1)=%v Contains(2)=%v, want false, true", s.Contains(1), s.Contains(2))
	}
	if n := s.Get([]kv.BlockHash{1, 2}); n != 0 {
		t.Fatalf("Get(1,2) = %d: a partial first page must end the run", n)
	}
	if n := s.Get([]kv.BlockHash{2, 1}); n != 1 {
		t.Fatalf("Get(2,1) = %d, want 1", n)
	}
	// Writing the missing rank (into room a removal made) completes the
	// page again, and the removal makes page 2 partial.
	s.Remove(Object{Page: 2, Rank: 1, Part: PartK})
	s.Remove(Object{Page: 2, Rank: 1, Part: PartV})
	if err := s.PutObjects(Object{Page: 1, Rank: 0, Part: PartK}, Object{Page: 1, Rank: 0, Part: PartV}); err != nil {
		t.Fatal(err)
	}
	if !s.Contains(1) || s.Contains(2) {
		t.Fatalf("Contains(1)=%v Contains(2)=%v after the repair, want true, false", s.Contains(1), s.Contains(2))
	}
	if err := s.PutObjects(Object{Page: 1, Rank: 2}); err == nil {
		t.Fatal("rank 2 accepted with TP size 2")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{Capacity: 0}, {Capacity: -1}, {Capacity: 4, Layout: Layout{TPSize: -1}},
		{Capacity: 4, Layout: Layout{TPSize: MaxTPSize + 1}}, {Capacity: 4, Layout: Layout{KeyPrefix: "a_b"}}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

func TestKeys(t *testing.T) {
	l := Layout{TPSize: 4, KeyPrefix: "tag"}
	o := Object{Page: 0xabc, Rank: 3, Part: PartV}
	if got, want := l.Key(o), "tag_0000000000000abc_3_v"; got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
	back, err := l.ParseKey(l.Key(o))
	if err != nil || back != o {
		t.Fatalf("ParseKey(Key(o)) = %v, %v", back, err)
	}
	for _, bad := range []string{"", "0000000000000abc_3_v", "tag_abc_3_v", "tag_0000000000000ABC_3_v", "tag_0000000000000abc_4_v",
		"tag_0000000000000abc_+3_v", "tag_0000000000000abc_03_v", "tag_0000000000000abc_3_x", "tag_0000000000000abc_3", "tag_000000000000zabc_3_v"} {
		if _, err := l.ParseKey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseKey(%q) err = %v, want ErrBadKey", bad, err)
		}
	}
}

// FuzzParseKey: keys come from outside (a pool's event stream). Whatever
// parses must spell back to the same key; nothing may panic.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"0000000000000abc_3_v", "x_0000000000000000_0_k", "ffffffffffffffff_12_k", "_", "0000000000000abc__v"} {
		f.Add(s, uint8(16), false)
	}
	f.Fuzz(func(t *testing.T, key string, tp uint8, prefix bool) {
		l := Layout{TPSize: int(tp)%MaxTPSize + 1}
		if prefix {
			l.KeyPrefix = "x"
		}
		o, err := l.ParseKey(key)
		if err != nil {
			return
		}
		if back := l.Key(o); back != key {
			t.Fatalf("ParseKey(%q) = %+v, which spells %q", key, o, back)
		}
	})
}
