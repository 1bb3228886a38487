package flashindex

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
)

// refPool is the reference model of the shared-pool index: the set of
// objects its event stream says are present, emptied by every gap or new
// epoch, and a page is a hit when all its objects are in the set.
type refPool struct {
	layout     kvpool.Layout
	epoch, seq uint64
	objects    map[kvpool.Object]bool
}

func (r *refPool) apply(epoch uint64, evs []kvpool.Event) {
	if epoch != r.epoch {
		r.epoch, r.seq, r.objects = epoch, 0, map[kvpool.Object]bool{}
	}
	for _, ev := range evs {
		if ev.Seq <= r.seq {
			continue
		}
		if ev.Seq != r.seq+1 {
			r.objects = map[kvpool.Object]bool{}
		}
		r.seq = ev.Seq
		if ev.Kind == kv.Stored {
			r.objects[ev.Object] = true
		} else {
			delete(r.objects, ev.Object)
		}
	}
}

func (r *refPool) has(h kv.BlockHash) bool {
	for _, o := range r.layout.Objects(nil, h) {
		if !r.objects[o] {
			return false
		}
	}
	return true
}

// findWithPool is the reference FindMatches with a pool: for every live
// worker, walk the prompt while each block is on one of its own tiers or
// complete in the pool; the pool's share is what that walk reaches beyond
// the worker's own disk-level depth.
func (r *refModel) findWithPool(pool *refPool, live map[string]bool, hashes []kv.BlockHash) (map[string]WorkerMatch, int) {
	out := r.find(hashes)
	for key := range live {
		var w string
		var dp uint32
		fmt.Sscanf(key, "%s %d", &w, &dp)
		held := func(h kv.BlockHash) bool {
			for t := range kv.NumTiers {
				if r.held[refKey{w, dp, kv.Tier(t)}][h] {
					return true
				}
			}
			return false
		}
		all := 0
		for all < len(hashes) && (held(hashes[all]) || pool.has(hashes[all])) {
			all++
		}
		k := fmt.Sprintf("%s/%d", w, dp)
		m, ok := out[k]
		own := m.Device + m.Host + m.Disk + m.Shared
		if all == own {
			continue
		}
		if !ok {
			m = WorkerMatch{Worker: w, DPRank: dp}
		}
		m.Shared += all - own
		out[k] = m
	}
	prefix := 0
	for prefix < len(hashes) && pool.has(hashes[prefix]) {
		prefix++
	}
	return out, prefix
}

// TestPoolIndexMatchesReference drives the index (with a shared-pool index
// attached) and the reference models with the same random worker events and
// a real kvpool.Store's event stream — whole and partial puts, removals,
// reads, on a capacity that splits pages — with events lost (gaps),
// replayed (duplicates) and pool restarts (new epochs), and compares every
// worker's overlap, the pool prefix and the depth histogram.
func TestPoolIndexMatchesReference(t *testing.T) {
	seeds := 12
	if raceEnabled {
		seeds = 3
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 42))
		layout := kvpool.Layout{TPSize: 1 + rng.IntN(3)}
		tree := newBlockTree(rng, 60, 3)
		ix := New(Config{WriteChunk: 3, SweepChunk: 7})
		pix, err := NewPoolIndex(layout, 0)
		if err != nil {
			t.Fatal(err)
		}
		ix.AttachPool(pix)
		ref := newRef()
		rp := &refPool{layout: layout}
		live := map[string]bool{}
		epoch := uint64(1)
		newStore := func() *kvpool.Store {
			s, err := kvpool.New(kvpool.Config{Layout: layout, Capacity: 40*layout.ObjectsPerPage() + 1, Epoch: epoch})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		store := newStore()
		var lastBatch []kvpool.Event
		credited := 0 // queries where the pool extended some worker
		for step := range 1500 {
			switch x := rng.IntN(100); {
			case x < 45:
				o := randomOp(rng, tree, 3, 2, false)
				k := fmt.Sprintf("%s %d", o.worker, o.dp)
				if o.remove {
					ix.RemoveWorker(o.worker)
					ref.removeWorker(o.worker)
					for key := range live {
						var w string
						fmt.Sscanf(key, "%s", &w)
						if w == o.worker {
							delete(live, key)
						}
					}
					continue
				}
				if err := ix.Apply(o.worker, o.dp, o.ev); err != nil {
					t.Fatal(err)
				}
				ref.apply(o.worker, o.dp, o.ev)
				if o.ev.Kind == kv.Cleared {
					for key := range live {
						var w string
						fmt.Sscanf(key, "%s", &w)
						if w == o.worker {
							delete(live, key)
						}
					}
				} else {
					live[k] = true
				}
			default:
				p := tree.path(rng.IntN(len(tree.hashes)))
				switch y := rng.IntN(10); {
				case y < 5:
					for _, h := range p[rng.IntN(len(p)):] {
						store.Put(h)
					}
				case y < 7:
					_ = store.PutObjects(kvpool.Object{Page: p[rng.IntN(len(p))], Rank: uint16(rng.IntN(layout.TPSize)), Part: kvpool.Part(rng.IntN(2))})
				case y < 8:
					store.Remove(kvpool.Object{Page: p[rng.IntN(len(p))], Rank: uint16(rng.IntN(layout.TPSize)), Part: kvpool.Part(rng.IntN(2))})
				case y < 9:
					store.Get(p)
				default:
					if rng.IntN(10) == 0 { // the pool restarts empty
						epoch++
						store = newStore()
					}
				}
				evs := store.TakeEvents()
				switch z := rng.IntN(20); {
				case z == 0 && len(evs) > 0: // an event is lost
					i := rng.IntN(len(evs))
					evs = append(evs[:i:i], evs[i+1:]...)
				case z == 1: // a batch is delivered again
					evs = append(lastBatch, evs...)
				}
				lastBatch = evs
				pix.Apply(store.Epoch(), evs)
				rp.apply(store.Epoch(), evs)
			}
			for range 2 {
				q := tree.path(rng.IntN(len(tree.hashes)))
				if rng.IntN(3) == 0 {
					q = q[:rng.IntN(len(q)+1)]
				}
				want, prefix := ref.findWithPool(rp, live, q)
				got := ix.FindMatches(q)
				gm := map[string]WorkerMatch{}
				for _, w := range got.Workers {
					gm[fmt.Sprintf("%s/%d", w.Worker, w.DPRank)] = w
				}
				if len(gm) != len(want) || got.PoolPrefix != prefix {
					t.Fatalf("seed %d step %d: workers %v pool prefix %d, want %v, %d", seed, step, gm, got.PoolPrefix, want, prefix)
				}
				for k, w := range want {
					if w.Shared > 0 {
						credited++
					}
					if gm[k] != w {
						t.Fatalf("seed %d step %d: %s: got %+v, want %+v", seed, step, k, gm[k], w)
					}
				}
			}
		}
		st := pix.Stats()
		if seed == 0 {
			t.Logf("pool index stats: %+v", st)
		}
		if st.Gaps == 0 || st.Duplicates == 0 || st.Epochs == 0 || credited == 0 {
			t.Fatalf("seed %d: the run did not exercise gaps, duplicates, epochs and pool credit (%d): %+v", seed, credited, st)
		}
	}
}

func TestPoolIndexRules(t *testing.T) {
	l := kvpool.Layout{TPSize: 2}
	store, _ := kvpool.New(kvpool.Config{Layout: l, Capacity: 100, Epoch: 5})
	pix, _ := NewPoolIndex(l, 0)
	ix := New(Config{})
	ix.AttachPool(pix)
	prompt := []kv.BlockHash{11, 12, 13, 14}

	for _, h := range prompt[:3] {
		store.Put(h)
	}
	store.Remove(kvpool.Object{Page: 12, Rank: 1, Part: kvpool.PartK})
	pix.Apply(store.Epoch(), store.TakeEvents())
	// Page 12 lacks one of its four objects: the pool's prefix stops there.
	if m := ix.FindMatches(prompt); m.PoolPrefix != 1 || len(m.Workers) != 0 {
		t.Fatalf("partial page: pool prefix %d, workers %v; want 1 and none known", m.PoolPrefix, m.Workers)
	}
	// A worker holding page 12 itself bridges the hole: 11 from the pool,
	// 12 its own, 13 from the pool.
	if err := ix.Apply("w", 0, kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Parent: 11, Blocks: []kv.BlockHash{12}}); err != nil {
		t.Fatal(err)
	}
	m := ix.FindMatches(prompt)
	if len(m.Workers) != 1 || m.Workers[0] != (WorkerMatch{Worker: "w", Shared: 3}) {
		t.Fatalf("bridged hole: %+v, want w with Shared 3", m.Workers)
	}
	// A lost event: the index no longer trusts what it knew.
	store.Put(14)
	evs := store.TakeEvents()
	if !pix.Apply(store.Epoch(), evs[1:]) {
		t.Fatal("a sequence gap did not clear the index")
	}
	if st := pix.Stats(); st.Gaps != 1 || st.CompletePages != 0 || st.Objects != 3 {
		t.Fatalf("after the gap: %+v; want 1 gap, only the 3 objects after it", st)
	}
	// Replayed events are ignored.
	if pix.Apply(store.Epoch(), evs) {
		t.Fatal("a replayed batch cleared the index")
	}
	if st := pix.Stats(); st.Duplicates != 4 {
		t.Fatalf("duplicates %d, want 4", st.Duplicates)
	}
	// A snapshot restores the whole view, and the stream resumes after it.
	if err := pix.Load(store.Epoch(), store.Seq(), store.Objects()); err != nil {
		t.Fatal(err)
	}
	if m := ix.FindMatches(prompt); m.PoolPrefix != 1 || m.Workers[0].Shared != 4 {
		t.Fatalf("after snapshot: pool prefix %d, %+v", m.PoolPrefix, m.Workers)
	}
	if e, s := pix.Position(); e != 5 || s != store.Seq() {
		t.Fatalf("position %d/%d", e, s)
	}
	if err := pix.Load(5, 1, []kvpool.Object{{Page: 1, Rank: 2}}); err == nil {
		t.Fatal("a snapshot object outside the layout was accepted")
	}
	// A pool restart (new epoch) clears it too.
	store2, _ := kvpool.New(kvpool.Config{Layout: l, Capacity: 100, Epoch: 6})
	store2.Put(99)
	if !pix.Apply(store2.Epoch(), store2.TakeEvents()) || !pix.Has(99) || pix.Has(11) {
		t.Fatal("new epoch: want a cleared index holding only the new pool's page")
	}
}

// BenchmarkFindMatchesWithPool: a 100k-token prompt (1,563 blocks of 64
// tokens) on 8 workers that each hold a different part of it on device,
// with the pool holding all of it — the worst case for the extension walk,
// which reads every block of the prompt from the pool index once.
func BenchmarkFindMatchesWithPool(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]kv.BlockHash, 1563)
	for i := range prompt {
		prompt[i] = kv.BlockHash(rng.Uint64())
	}
	l := kvpool.Layout{TPSize: 2}
	store, _ := kvpool.New(kvpool.Config{Layout: l, Capacity: len(prompt) * l.ObjectsPerPage()})
	for _, h := range prompt {
		store.Put(h)
	}
	pix, _ := NewPoolIndex(l, 0)
	pix.Apply(store.Epoch(), store.TakeEvents())
	for _, attach := range []bool{false, true} {
		b.Run(fmt.Sprintf("pool=%v", attach), func(b *testing.B) {
			ix := New(Config{})
			for w := range 8 {
				n := (w + 1) * len(prompt) / 9
				if err := ix.Apply(fmt.Sprintf("w%d", w), 0, kv.Event{Kind: kv.Stored, Blocks: prompt[:n]}); err != nil {
					b.Fatal(err)
				}
			}
			if attach {
				ix.AttachPool(pix)
			}
			var m Matches
			for b.Loop() {
				ix.FindMatchesInto(&m, prompt)
			}
		})
	}
}

// FindOptions.PoolStale leaves the pool out of a lookup, FindMatches' and
// Resident's alike, as if none were attached; the workers' own blocks still
// count.
func TestPoolStaleLeavesThePoolOut(t *testing.T) {
	l := kvpool.Layout{TPSize: 1}
	store, _ := kvpool.New(kvpool.Config{Layout: l, Capacity: 100, Epoch: 1})
	pix, _ := NewPoolIndex(l, 0)
	ix := New(Config{})
	ix.AttachPool(pix)
	store.Put(11)
	store.Put(12)
	store.Put(13)
	pix.Apply(store.Epoch(), store.TakeEvents())
	for _, e := range []struct {
		worker string
		blocks []kv.BlockHash
	}{{"a", []kv.BlockHash{11, 12, 13}}, {"b", []kv.BlockHash{11}}} {
		if err := ix.Apply(e.worker, 0, kv.Event{Kind: kv.Stored, Tier: kv.TierDevice, Blocks: e.blocks}); err != nil {
			t.Fatal(err)
		}
	}
	prompt := []kv.BlockHash{11, 12, 13}
	for _, stale := range []bool{false, true} {
		wantShared, wantPrefix := 2, 3
		if stale {
			wantShared, wantPrefix = 0, 0
		}
		opt := FindOptions{PoolStale: stale}
		var m Matches
		ix.FindMatchesWith(&m, prompt, opt)
		a, _ := m.Of("a")
		b, _ := m.Of("b")
		if a.Device != 3 || b.Device != 1 || b.Shared != wantShared || m.PoolPrefix != wantPrefix {
			t.Errorf("PoolStale %v: FindMatches a %+v, b %+v, pool prefix %d; want b shared %d, prefix %d", stale, a, b, m.PoolPrefix, wantShared, wantPrefix)
		}
		if chain, _ := ix.ResidentWith(&m, []kv.BlockHash{13}, nil, opt); len(chain) != 3 {
			t.Fatalf("Resident chain %v, want 3 blocks", chain)
		}
		if b, _ := m.Of("b"); b.Device != 1 || b.Shared != wantShared {
			t.Errorf("PoolStale %v: Resident b %+v, want shared %d", stale, b, wantShared)
		}
	}
}
