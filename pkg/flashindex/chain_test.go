package flashindex

import (
	"slices"
	"sync"
	"testing"

	"switchyard.dev/pkg/kv"
)

// checkResident holds Chain and Resident of tree node i to the reference:
// a known chain is the block's path; a block whose whole path some tier of
// some worker holds has a known chain (every event of these tests names its
// parent; a block stored under a parent every tier had dropped may be an
// orphan); and Resident answers what FindMatches of the path answers.
func checkResident(t *testing.T, ix *Index, ref *refModel, tree *blockTree, i int) {
	t.Helper()
	tip, path := tree.hashes[i], tree.path(i)
	chain, ok := ix.Chain(tip, nil)
	held := true
	for _, b := range path {
		some := false
		for _, set := range ref.held {
			some = some || set[b]
		}
		held = held && some
	}
	if held && (!ok || !slices.Equal(chain, path)) {
		t.Fatalf("Chain of a block whose path is held: %v (ok %v), want its path %v", chain, ok, path)
	}
	if ok && !slices.Equal(chain, path) {
		t.Fatalf("Chain: %v, want %v", chain, path)
	}
	var m Matches
	if _, used := ix.Resident(&m, []kv.BlockHash{tip}, nil); (used == 0) != ok {
		t.Fatalf("Resident used anchor %d, Chain ok %v", used, ok)
	}
	if !ok {
		if len(m.Workers) != 0 {
			t.Fatalf("Resident of an unknown chain: %+v", m.Workers)
		}
		return
	}
	want := ref.find(path)
	if len(m.Workers) != len(want) {
		t.Fatalf("Resident: %+v, want %+v", m.Workers, want)
	}
	for _, w := range m.Workers {
		if want[w.Worker+"/0"] != w {
			t.Fatalf("Resident of %s: %+v, want %+v", w.Worker, w, want[w.Worker+"/0"])
		}
	}
}

func TestChainOfAnOrphanOrAnUnknownTipIsUnknown(t *testing.T) {
	ix := New(Config{})
	// a ← b ← c stored with parents; x ← y stored under a parent the index
	// never saw.
	for _, ev := range []kv.Event{
		{Kind: kv.Stored, Tier: kv.TierDevice, Blocks: []kv.BlockHash{1, 2}},
		{Kind: kv.Stored, Tier: kv.TierHost, Parent: 2, Blocks: []kv.BlockHash{3}},
		{Kind: kv.Stored, Tier: kv.TierDevice, Parent: 99, Blocks: []kv.BlockHash{7, 8}},
	} {
		if err := ix.Apply("w", 0, ev); err != nil {
			t.Fatal(err)
		}
	}
	if chain, ok := ix.Chain(3, nil); !ok || !slices.Equal(chain, []kv.BlockHash{1, 2, 3}) {
		t.Fatalf("Chain(3) = %v, %v", chain, ok)
	}
	var m Matches
	if chain, used := ix.Resident(&m, []kv.BlockHash{3}, nil); used != 0 || len(chain) != 3 || len(m.Workers) != 1 || m.Workers[0].Device != 2 || m.Workers[0].Host != 1 {
		t.Fatalf("Resident(3): chain %v (anchor %d), %+v", chain, used, m.Workers)
	}
	// Anchors deepest first: an unknown one and an orphan are passed over.
	if chain, used := ix.Resident(&m, []kv.BlockHash{42, 8, 2, 1}, nil); used != 2 || len(chain) != 2 || m.Workers[0].Device != 2 {
		t.Fatalf("Resident(42, 8, 2, 1): chain %v (anchor %d), %+v", chain, used, m.Workers)
	}
	for _, tip := range []kv.BlockHash{8, 42} {
		if chain, ok := ix.Chain(tip, nil); ok || len(chain) != 0 {
			t.Fatalf("Chain(%d) = %v, %v: want unknown", tip, chain, ok)
		}
		if chain, used := ix.Resident(&m, []kv.BlockHash{tip}, nil); used != -1 || len(chain) != 0 || len(m.Workers) != 0 {
			t.Fatalf("Resident(%d): chain %v (anchor %d), %+v", tip, chain, used, m.Workers)
		}
	}
	// The device copy of the prefix goes: the host block no longer extends
	// a device prefix, and nothing is rooted past the hole.
	if err := ix.Apply("w", 0, kv.Event{Kind: kv.Removed, Tier: kv.TierDevice, Blocks: []kv.BlockHash{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if ix.Resident(&m, []kv.BlockHash{3}, nil); len(m.Workers) != 0 {
		t.Fatalf("after the prefix left: %+v", m.Workers)
	}
}

func TestMatchesOfTakesTheDeepestRank(t *testing.T) {
	m := Matches{Workers: []WorkerMatch{
		{Worker: "w", DPRank: 0, Device: 3, Host: 9},
		{Worker: "x", DPRank: 0, Device: 8},
		{Worker: "w", DPRank: 1, Device: 5},
		{Worker: "w", DPRank: 2, Device: 5, Disk: 1},
	}}
	if got, ok := m.Of("w"); !ok || got.DPRank != 2 {
		t.Fatalf("Of(w) = %+v, %v: want rank 2 (longest device prefix, then extensions)", got, ok)
	}
	if _, ok := m.Of("z"); ok {
		t.Fatal("a worker with no match matched")
	}
}

// A chain Resident kept is forgotten with its block: a block deleted and
// stored again under a parent the index no longer links to a root has no
// known chain, whatever Resident said of it before.
func TestResidentForgetsTheChainOfADeletedBlock(t *testing.T) {
	ix := New(Config{})
	chain := []kv.BlockHash{11, 12, 13, 14}
	if err := ix.Apply("w", 0, kv.Event{Kind: kv.Stored, Blocks: chain}); err != nil {
		t.Fatal(err)
	}
	var m Matches
	for range 2 { // walked, then kept
		if got, used := ix.Resident(&m, chain[3:], nil); used != 0 || !slices.Equal(got, chain) || len(m.Workers) != 1 || m.Workers[0].Device != 4 {
			t.Fatalf("Resident of a stored chain: %v (anchor %d), %+v", got, used, m.Workers)
		}
	}
	if err := ix.Apply("w", 0, kv.Event{Kind: kv.Removed, Blocks: chain}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Apply("w", 0, kv.Event{Kind: kv.Stored, Parent: 13, Blocks: chain[3:]}); err != nil {
		t.Fatal(err)
	}
	if got, used := ix.Resident(&m, chain[3:], nil); used != -1 || len(got) != 0 || len(m.Workers) != 0 {
		t.Fatalf("Resident of a block stored again under an unlinked parent: %v (anchor %d), %+v; want no chain", got, used, m.Workers)
	}
	// Its parent's own Stored links it again, as far as the index knows.
	if err := ix.Apply("w", 0, kv.Event{Kind: kv.Stored, Blocks: chain[:3]}); err != nil {
		t.Fatal(err)
	}
	if got, used := ix.Resident(&m, chain[3:], nil); used != 0 || !slices.Equal(got, chain) {
		t.Fatalf("Resident once the parents are stored again: %v (anchor %d)", got, used)
	}
}

// Resident's kept chains are shared by concurrent readers while events are
// applied (run with -race).
func TestResidentConcurrentWithApply(t *testing.T) {
	ix := New(Config{})
	chains := make([][]kv.BlockHash, 8)
	for s := range chains {
		for k := range 64 {
			chains[s] = append(chains[s], kv.BlockHash(s*1000+k+1))
		}
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Go(func() {
			var m Matches
			var buf []kv.BlockHash
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				c := chains[(r+i)%len(chains)]
				var used int
				buf, used = ix.Resident(&m, c[len(c)-1:], buf)
				if used == 0 && !slices.Equal(buf, c) {
					t.Errorf("Resident: %v, want %v", buf, c)
					return
				}
			}
		})
	}
	for round := range 200 {
		c := chains[round%len(chains)]
		kind := kv.Stored
		if round%3 == 2 {
			kind = kv.Removed
		}
		if err := ix.Apply("w", 0, kv.Event{Kind: kind, Blocks: c}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	readers.Wait()
}
