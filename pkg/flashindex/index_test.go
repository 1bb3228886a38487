package flashindex

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

func chain(n int, seed uint64) []kv.BlockHash {
	out := make([]kv.BlockHash, n)
	for i := range out {
		local := kv.LocalHash(seed*1_000_003 + uint64(i) + 1)
		if i == 0 {
			out[i] = kvhash.Root(local)
		} else {
			out[i] = kvhash.Chain(out[i-1], local)
		}
	}
	return out
}

func byWorker(m Matches) map[string]WorkerMatch {
	out := map[string]WorkerMatch{}
	for _, w := range m.Workers {
		out[fmt.Sprintf("%s/%d", w.Worker, w.DPRank)] = w
	}
	return out
}

func TestFindMatchesRules(t *testing.T) {
	p := chain(10, 1)
	other := chain(10, 2)
	type step struct {
		worker string
		ev     kv.Event
	}
	tests := []struct {
		name  string
		steps []step
		want  map[string]WorkerMatch
	}{
		{"empty index", nil, map[string]WorkerMatch{}},
		{"full prefix on device", []step{{"a", kv.Event{Kind: kv.Stored, Blocks: p}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 10}}},
		{"partial prefix", []step{{"a", kv.Event{Kind: kv.Stored, Blocks: p[:4]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 4}}},
		{"unrelated chain", []step{{"a", kv.Event{Kind: kv.Stored, Blocks: other}}},
			map[string]WorkerMatch{}},
		{"suffix without its prefix does not count", []step{
			{"a", kv.Event{Kind: kv.Stored, Parent: p[4], Blocks: p[5:]}}},
			map[string]WorkerMatch{}},
		{"prefix arriving after its suffix joins them", []step{
			{"a", kv.Event{Kind: kv.Stored, Parent: p[4], Blocks: p[5:]}},
			{"a", kv.Event{Kind: kv.Stored, Blocks: p[:5]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 10}}},
		{"middle eviction cuts the prefix", []step{
			{"a", kv.Event{Kind: kv.Stored, Blocks: p}},
			{"a", kv.Event{Kind: kv.Removed, Blocks: p[3:4]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 3}}},
		{"refilled hole restores depth", []step{
			{"a", kv.Event{Kind: kv.Stored, Blocks: p}},
			{"a", kv.Event{Kind: kv.Removed, Blocks: p[3:4]}},
			{"a", kv.Event{Kind: kv.Stored, Parent: p[2], Blocks: p[3:4]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 10}}},
		{"host then disk extend the device prefix", []step{
			{"a", kv.Event{Kind: kv.Stored, Blocks: p[:3]}},
			{"a", kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Parent: p[2], Blocks: p[3:6]}},
			{"a", kv.Event{Kind: kv.Stored, Tier: kv.TierDisk, Parent: p[5], Blocks: p[6:8]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 3, Host: 3, Disk: 2}}},
		{"host copy of a device block does not extend", []step{
			{"a", kv.Event{Kind: kv.Stored, Blocks: p[:3]}},
			{"a", kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Blocks: p[:2]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 3}}},
		{"host only", []step{{"a", kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Blocks: p[:4]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Host: 4}}},
		{"cleared", []step{
			{"a", kv.Event{Kind: kv.Stored, Blocks: p}},
			{"b", kv.Event{Kind: kv.Stored, Blocks: p[:2]}},
			{"a", kv.Event{Kind: kv.Cleared}}},
			map[string]WorkerMatch{"b/0": {Worker: "b", Device: 2}}},
		{"duplicates are harmless", []step{
			{"a", kv.Event{Kind: kv.Stored, Blocks: p[:5]}},
			{"a", kv.Event{Kind: kv.Stored, Blocks: p[:5]}},
			{"a", kv.Event{Kind: kv.Removed, Blocks: p[7:]}}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := New(Config{})
			for _, s := range tt.steps {
				if err := ix.Apply(s.worker, 0, s.ev); err != nil {
					t.Fatal(err)
				}
			}
			got := byWorker(ix.FindMatches(p))
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, w := range tt.want {
				if got[k] != w {
					t.Fatalf("%s: got %+v, want %+v", k, got[k], w)
				}
			}
		})
	}
}

func TestApplyRejectsBadEvents(t *testing.T) {
	ix := New(Config{})
	if err := ix.Apply("a", 0, kv.Event{Kind: 9}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if err := ix.Apply("a", 0, kv.Event{Kind: kv.Stored, Tier: 9}); err == nil {
		t.Fatal("unknown tier accepted")
	}
}

func TestMaxBlocksBoundsTheIndex(t *testing.T) {
	ix := New(Config{MaxBlocks: 5})
	p := chain(10, 1)
	if err := ix.Apply("a", 0, kv.Event{Kind: kv.Stored, Blocks: p}); err != nil {
		t.Fatal(err)
	}
	if n := ix.Len(); n != 5 {
		t.Fatalf("Len = %d, want 5", n)
	}
	if st := ix.Stats(); st.Dropped != 5 {
		t.Fatalf("Dropped = %d, want 5", st.Dropped)
	}
	if m := byWorker(ix.FindMatches(p)); m["a/0"].Device != 5 {
		t.Fatalf("got %+v", m)
	}
}

func TestFrequencies(t *testing.T) {
	m := Matches{DeviceDepths: []DepthCount{{2, 1}, {4, 2}}}
	got := m.Frequencies()
	want := []int{3, 3, 2, 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestOnlyRebuildsDepths(t *testing.T) {
	m := Matches{
		Workers: []WorkerMatch{
			{Worker: "a", Device: 4}, {Worker: "b", Device: 2}, {Worker: "c", Device: 4}, {Worker: "d", Host: 3},
		},
		DeviceDepths: []DepthCount{{2, 1}, {4, 2}},
	}
	m.Only(func(w string) bool { return w != "c" })
	if len(m.Workers) != 3 {
		t.Fatalf("workers %+v, want a, b, d", m.Workers)
	}
	if got, want := fmt.Sprint(m.Frequencies()), fmt.Sprint([]int{2, 2, 1, 1}); got != want {
		t.Fatalf("frequencies %v, want %v", got, want)
	}
}

// TestDifferential replays long random event streams (stores of arbitrary
// segments, tail and middle removals, clears, worker removal, duplicates,
// out-of-order suffixes, all tiers) into the index and the reference model,
// with several workers' events applied concurrently and readers querying all
// the time, and compares every answer at quiescent points.
func TestDifferential(t *testing.T) {
	for _, tc := range []struct {
		name       string
		seed       uint64
		deviceOnly bool
		workers    int
		dps        int
	}{
		{"device", 1, true, 6, 1},
		{"tiers", 2, false, 6, 1},
		{"dp-ranks", 3, false, 4, 3},
		{"many-workers", 4, true, 150, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tc.seed, 99))
			tree := newBlockTree(rng, 600, 3)
			ix := New(Config{WriteChunk: 3, SweepChunk: 50})
			ref := newRef()

			var stop atomic.Bool
			var readers sync.WaitGroup
			for r := 0; r < 2; r++ {
				readers.Add(1)
				go func(seed uint64) {
					defer readers.Done()
					rr := rand.New(rand.NewPCG(seed, 7))
					for !stop.Load() {
						q := tree.path(rr.IntN(len(tree.hashes)))
						m := ix.FindMatches(q)
						for _, w := range m.Workers {
							if w.Device < 0 || w.Host < 0 || w.Disk < 0 || w.Shared < 0 ||
								w.Device+w.Host+w.Disk+w.Shared > len(q) {
								t.Errorf("impossible match %+v for %d blocks", w, len(q))
								return
							}
						}
						_ = ix.Stats()
					}
				}(uint64(r))
			}

			rounds := 300
			if testing.Short() || raceEnabled {
				rounds = 60
			}
			for round := 0; round < rounds; round++ {
				ops := make([]op, 1+rng.IntN(30))
				for i := range ops {
					ops[i] = randomOp(rng, tree, tc.workers, tc.dps, tc.deviceOnly)
				}
				// Per-worker order is kept; different workers run concurrently.
				perWorker := map[string][]op{}
				for _, o := range ops {
					perWorker[o.worker] = append(perWorker[o.worker], o)
				}
				var wg sync.WaitGroup
				for _, wops := range perWorker {
					wg.Add(1)
					go func(wops []op) {
						defer wg.Done()
						for _, o := range wops {
							if o.remove {
								ix.RemoveWorker(o.worker)
							} else if err := ix.Apply(o.worker, o.dp, o.ev); err != nil {
								t.Error(err)
							}
						}
					}(wops)
				}
				wg.Wait()
				for _, o := range ops {
					if o.remove {
						ref.removeWorker(o.worker)
					} else {
						ref.apply(o.worker, o.dp, o.ev)
					}
				}
				for k := 0; k < 8; k++ {
					q := tree.path(rng.IntN(len(tree.hashes)))
					if k == 0 {
						q = append(q, chain(5, uint64(round)+1000)...) // unknown tail
					}
					checkAgainst(t, ix, ref, q)
				}
				checkEntries(t, ix, ref)
				if round%50 == 0 {
					checkDump(t, ix, ref, tree)
				}
			}
			stop.Store(true)
			readers.Wait()
		})
	}
}

func checkEntries(t *testing.T, ix *Index, ref *refModel) {
	t.Helper()
	var want [kv.NumTiers]int
	for k, set := range ref.held {
		want[k.tier] += len(set)
	}
	if got := ix.Stats().Entries; got != want {
		t.Fatalf("entries: got %v, want %v", got, want)
	}
}

// checkDump rebuilds each worker from Dump into a fresh index and compares
// answers with the reference restricted to that worker.
func checkDump(t *testing.T, ix *Index, ref *refModel, tree *blockTree) {
	t.Helper()
	rebuilt := New(Config{})
	workers := map[string]bool{}
	for k := range ref.held {
		workers[k.worker] = true
	}
	for w := range workers {
		evs := ix.Dump(w)
		// Apply in reverse to exercise out-of-order rebuilds.
		for i := len(evs) - 1; i >= 0; i-- {
			if err := rebuilt.Apply(w, evs[i].DPRank, evs[i].Event); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < 20; i++ {
		checkAgainst(t, rebuilt, ref, tree.path(i*len(tree.hashes)/20))
	}
}
