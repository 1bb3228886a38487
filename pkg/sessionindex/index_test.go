package sessionindex

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
)

var t0 = time.Unix(1_700_000_000, 0)

func hs(v ...uint64) []kv.BlockHash {
	out := make([]kv.BlockHash, len(v))
	for i, x := range v {
		out[i] = kv.BlockHash(x)
	}
	return out
}

func TestDifferentialRandom(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7+1))
		data := make([]byte, 400)
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		runDifferential(t, decodeOps(data), 1+int(seed%4))
	}
}

func TestDifferentialTargeted(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*13+5))
		maxSessions := 1 + int(seed%4)
		runDifferential(t, genOps(r, 300, maxSessions), maxSessions)
	}
}

func FuzzUpdates(f *testing.F) {
	f.Add([]byte{0, 200, 2, 1, 2, 3, 8, 1, 0, 4, 2, 1, 3})
	f.Add([]byte{0, 200, 3, 1, 2, 3, 2, 0, 0, 2, 10, 0, 3, 40, 1, 1})
	f.Add([]byte{0, 5, 1, 6, 0, 200, 1, 5, 0, 6, 1, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2000 {
			return
		}
		runDifferential(t, decodeOps(data), 3)
	})
}

func TestUpdateFromStoredErrors(t *testing.T) {
	// Forest: 1-2-3 (s1 on w), root 10.
	setup := func() *Index {
		x := New(Config{})
		must(t, x.UpdateFromStored("s1", "w", 0, hs(1, 2, 3), t0))
		must(t, x.UpdateFromStored("s2", "w", 0, hs(10), t0))
		return x
	}
	tests := []struct {
		name   string
		parent uint64
		blocks []uint64
		want   error
		block  uint64 // UpdateError.Block
	}{
		{"extends", 3, []uint64{4, 5}, nil, 0},
		{"branches", 1, []uint64{7}, nil, 0},
		{"restates known lineage", 1, []uint64{2, 3, 4}, nil, 0},
		{"grafts a root", 3, []uint64{10}, nil, 0},
		{"grafts a root after restating", 1, []uint64{2, 3, 10}, nil, 0},
		{"grafts a root under new blocks", 3, []uint64{20, 10}, nil, 0},
		{"reconnects a root", 99, []uint64{10, 11}, nil, 0},
		{"unknown parent", 99, []uint64{4}, ErrUnknownParent, 99},
		{"unknown parent onto a non-root", 99, []uint64{2}, ErrConflictingParent, 2},
		{"conflicting parent", 1, []uint64{3}, ErrConflictingParent, 3},
		{"known block claims root", 0, []uint64{2}, ErrConflictingParent, 2},
		{"known block after new one", 3, []uint64{20, 2}, ErrConflictingParent, 2},
		{"cycle grafting the root under its descendant", 3, []uint64{1}, ErrCyclicParent, 1},
		{"cycle grafting an ancestor's root", 2, []uint64{30, 1}, ErrCyclicParent, 1},
		// The walk up from the parent meets 2 before the grafted root.
		{"cycle restating below the grafted root", 3, []uint64{1, 2}, ErrCyclicParent, 2},
		{"duplicate block", 3, []uint64{4, 4}, ErrCyclicParent, 4},
		{"parent in blocks", 4, []uint64{4}, ErrCyclicParent, 4},
		{"zero hash", 3, []uint64{0}, ErrInvalid, 0},
		{"empty", 3, nil, ErrInvalid, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := setup()
			before := x.Stats()
			lin := x.Lineage("s1", "")
			err := x.UpdateFromStored("s3", "w", kv.BlockHash(tt.parent), hs(tt.blocks...), t0)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if err != nil {
				var ue *UpdateError
				if tt.want != ErrInvalid {
					if !errors.As(err, &ue) {
						t.Fatalf("error %T is not *UpdateError", err)
					}
					if ue.Block != kv.BlockHash(tt.block) || ue.Session != "s3" {
						t.Fatalf("error names session %q block %d, want s3 and %d", ue.Session, ue.Block, tt.block)
					}
				}
				after := x.Stats()
				if after.Nodes != before.Nodes || after.Sessions != before.Sessions || after.RejectedUpdates != before.RejectedUpdates+1 {
					t.Fatalf("refused update changed the index: %+v → %+v", before, after)
				}
				if diff := cmp.Diff(lin, x.Lineage("s1", "")); diff != "" {
					t.Fatalf("lineage changed:\n%s", diff)
				}
			}
			checkInvariants(t, x)
		})
	}
}

func TestCycleGraftingAncestorRoot(t *testing.T) {
	// 1 is a root with child 2 (s1). An update under 2 naming 30, 1 would
	// make 1 descend from itself: 1 → 2 → 30 → 1.
	x := New(Config{})
	must(t, x.UpdateFromStored("s1", "w", 0, hs(1, 2), t0))
	err := x.UpdateFromStored("s2", "w", 2, hs(30, 1), t0)
	if !errors.Is(err, ErrCyclicParent) {
		t.Fatalf("got %v, want cyclic", err)
	}
}

func TestFrontierRule(t *testing.T) {
	x := New(Config{})
	must(t, x.UpdateFromStored("s", "w", 0, hs(1, 2, 3), t0))
	must(t, x.UpdateFromStored("s", "w", 0, hs(1, 2), t0)) // ancestor: no-op
	want := []Chain{{Worker: "w", Blocks: hs(1, 2, 3)}}
	if diff := cmp.Diff(want, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
	must(t, x.UpdateFromStored("s", "w", 3, hs(4), t0)) // deeper subsumes
	must(t, x.UpdateFromStored("s", "w", 2, hs(9), t0)) // branch
	must(t, x.UpdateFromStored("s", "v", 3, hs(5), t0)) // other worker
	want = []Chain{
		{Worker: "v", Blocks: hs(1, 2, 3, 5), Shared: 3},
		{Worker: "w", Blocks: hs(1, 2, 3, 4), Shared: 3},
		{Worker: "w", Blocks: hs(1, 2, 9), Shared: 2},
	}
	if diff := cmp.Diff(want, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff(want[1:], x.Lineage("s", "w")); diff != "" {
		t.Fatal(diff)
	}
	fr := x.Frontiers("s")
	if len(fr) != 3 || fr[1] != (Frontier{Worker: "w", Block: 4, Depth: 4}) {
		t.Fatalf("frontiers %+v", fr)
	}
}

// TestFrontierRuleBranches: with several branch tips, a deeper node
// replaces only the tips on its root path, and a node on any tip's root path
// changes nothing.
func TestFrontierRuleBranches(t *testing.T) {
	x := New(Config{})
	must(t, x.UpdateFromStored("s", "w", 0, hs(1, 2, 3, 4), t0))
	must(t, x.UpdateFromStored("s", "w", 2, hs(5, 6), t0))
	must(t, x.UpdateFromStored("s", "w", 1, hs(7), t0))
	before := x.Stats()
	for _, h := range []uint64{1, 2, 3, 4, 5, 6, 7} {
		if !x.UpdateFromMatch("s", "w", kv.BlockHash(h), t0) {
			t.Fatalf("match on %d refused", h)
		}
	}
	if got := x.Stats(); got.Frontiers != 3 || got.Nodes != before.Nodes {
		t.Fatalf("matches on known lineage changed the frontiers: %+v → %+v", before, got)
	}
	must(t, x.UpdateFromStored("s", "w", 6, hs(8), t0)) // extends the 5-6 branch only
	want := []Chain{
		{Worker: "w", Blocks: hs(1, 2, 3, 4), Shared: 2},
		{Worker: "w", Blocks: hs(1, 7), Shared: 1},
		{Worker: "w", Blocks: hs(1, 2, 5, 6, 8), Shared: 2},
	}
	if diff := cmp.Diff(want, x.Lineage("s", "w")); diff != "" {
		t.Fatal(diff)
	}
	checkInvariants(t, x)
}

func TestSubAgentBranchesFromParent(t *testing.T) {
	x := New(Config{})
	must(t, x.UpdateFromStored("parent", "w0", 0, hs(1, 2, 3), t0))
	x.SetParent("child", "parent", t0)
	must(t, x.UpdateFromStored("child", "w1", 2, hs(7, 8), t0.Add(time.Second)))
	if diff := cmp.Diff([]Chain{{Worker: "w1", Blocks: hs(1, 2, 7, 8), Shared: 2}}, x.Lineage("child", "")); diff != "" {
		t.Fatal(diff)
	}
	sum, ok := x.Session("child")
	if !ok || sum.Parent != "parent" || sum.MaxDepth != 4 || sum.Frontiers != 1 {
		t.Fatalf("summary %+v", sum)
	}
	// Forgetting the parent keeps the child's lineage (shared nodes stay).
	x.ForgetSession("parent")
	if diff := cmp.Diff([]Chain{{Worker: "w1", Blocks: hs(1, 2, 7, 8)}}, x.Lineage("child", "")); diff != "" {
		t.Fatal(diff)
	}
	if got := x.Stats().Nodes; got != 4 {
		t.Fatalf("%d nodes after pruning, want 4", got)
	}
}

func TestRemoveRecedesAndClear(t *testing.T) {
	x := New(Config{})
	must(t, x.UpdateFromStored("a", "w", 0, hs(1, 2, 3, 4), t0))
	must(t, x.UpdateFromStored("b", "w", 2, hs(5), t0))
	if n := x.Remove("w", hs(4, 3)); n != 1 {
		t.Fatalf("moved %d", n)
	}
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(1, 2), Shared: 2}}, x.Lineage("a", "")); diff != "" {
		t.Fatal(diff)
	}
	if got := x.Stats().Nodes; got != 3 {
		t.Fatalf("%d nodes, want 3 (1,2,5)", got)
	}
	if n := x.ClearWorker("w"); n != 2 {
		t.Fatalf("cleared %d", n)
	}
	if x.Lineage("a", "") != nil || x.Stats().Nodes != 0 {
		t.Fatalf("left %v, %d nodes", x.Lineage("a", ""), x.Stats().Nodes)
	}
}

func TestMatch(t *testing.T) {
	x := New(Config{})
	if x.UpdateFromMatch("s", "w", 1, t0) {
		t.Fatal("match on an unknown block")
	}
	must(t, x.UpdateFromStored("a", "w", 0, hs(1, 2), t0))
	if !x.UpdateFromMatch("s", "v", 2, t0) {
		t.Fatal("match refused")
	}
	if diff := cmp.Diff([]Chain{{Worker: "v", Blocks: hs(1, 2), Shared: 2}}, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
}

func TestLRUCap(t *testing.T) {
	x := New(Config{MaxSessions: 2})
	must(t, x.UpdateFromStored("a", "w", 0, hs(1), t0))
	must(t, x.UpdateFromStored("b", "w", 0, hs(2), t0.Add(1)))
	x.UpdateFromMatch("a", "w", 1, t0.Add(2)) // a is now the most recent
	must(t, x.UpdateFromStored("c", "w", 0, hs(3), t0.Add(3)))
	var ids []string
	for _, s := range x.Sessions(0) {
		ids = append(ids, s.ID)
	}
	if diff := cmp.Diff([]string{"c", "a"}, ids); diff != "" {
		t.Fatal(diff)
	}
	if st := x.Stats(); st.EvictedSessions != 1 || st.Nodes != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestApplyKeepsLineageAcrossTiers(t *testing.T) {
	x := New(Config{})
	ev := func(k kv.EventKind, tier kv.Tier, parent uint64, b ...uint64) kv.Event {
		return kv.Event{Kind: k, Tier: tier, Parent: kv.BlockHash(parent), Blocks: hs(b...), SessionID: "s"}
	}
	must(t, x.Apply("w", ev(kv.Stored, kv.TierDevice, 0, 1, 2, 3), t0))
	// Demoted: on host first, then gone from GPU. Lineage must not recede.
	must(t, x.Apply("w", kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Blocks: hs(2, 3)}, t0))
	must(t, x.Apply("w", kv.Event{Kind: kv.Removed, Tier: kv.TierDevice, Blocks: hs(3, 2)}, t0))
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(1, 2, 3)}}, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
	// Gone from host too: the frontier recedes to 1, still on GPU.
	must(t, x.Apply("w", kv.Event{Kind: kv.Removed, Tier: kv.TierHost, Blocks: hs(3, 2)}, t0))
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(1)}}, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
	// A refused lineage claim is reported; residency still counts it.
	if err := x.Apply("w", ev(kv.Stored, kv.TierDevice, 77, 8), t0); !errors.Is(err, ErrUnknownParent) {
		t.Fatalf("got %v", err)
	}
	if x.ResidentBlocks("w") != 2 {
		t.Fatalf("resident %d", x.ResidentBlocks("w"))
	}
	// Resync from a snapshot that lost block 1 and holds a new chain.
	snap := []kv.Event{ev(kv.Stored, kv.TierDevice, 0, 40, 41)}
	must(t, x.Resync("w", snap, t0))
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(40, 41)}}, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
	must(t, x.Apply("w", kv.Event{Kind: kv.Cleared}, t0))
	if x.Lineage("s", "") != nil || x.ResidentBlocks("w") != 0 {
		t.Fatal("cleared worker kept state")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestApplyReconnectsUntaggedPrefix(t *testing.T) {
	x := New(Config{})
	// A request without a session computed the system prompt 1-2; a
	// session then extends it. Its lineage starts at the root.
	must(t, x.Apply("w", kv.Event{Kind: kv.Stored, Blocks: hs(1, 2)}, t0))
	must(t, x.Apply("w", kv.Event{Kind: kv.Stored, Parent: 2, Blocks: hs(3), SessionID: "s"}, t0))
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(1, 2, 3)}}, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
	// Resident on another worker only: no reconnection there.
	if err := x.Apply("v", kv.Event{Kind: kv.Stored, Parent: 9, Blocks: hs(10), SessionID: "s"}, t0); !errors.Is(err, ErrUnknownParent) {
		t.Fatalf("got %v", err)
	}
	// The same through a snapshot.
	y := New(Config{})
	must(t, y.Resync("w", []kv.Event{
		{Kind: kv.Stored, Blocks: hs(1)},
		{Kind: kv.Stored, Parent: 1, Blocks: hs(2)},
		{Kind: kv.Stored, Parent: 2, Blocks: hs(3), SessionID: "s"},
	}, t0))
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(1, 2, 3)}}, y.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
}

// TestApplyMatchWaitsForResidency: a route decision's hit is recorded only
// once the worker's events put the block there; a prefix stored without a
// session id becomes the session's lineage.
func TestApplyMatchWaitsForResidency(t *testing.T) {
	x := New(Config{})
	if x.ApplyMatch("s", "w", 2, t0) {
		t.Fatal("match before any event")
	}
	// Warm-up without a session: residency only, no lineage yet.
	must(t, x.Apply("w", kv.Event{Kind: kv.Stored, Blocks: hs(1, 2)}, t0))
	if x.ApplyMatch("s", "v", 2, t0) {
		t.Fatal("match on a worker that does not hold the block")
	}
	if !x.ApplyMatch("s", "w", 2, t0) {
		t.Fatal("match on a resident block refused")
	}
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(1, 2)}}, x.Lineage("s", "")); diff != "" {
		t.Fatal(diff)
	}
	// Known lineage: a second session's hit shares it.
	if !x.ApplyMatch("t", "w", 1, t0) {
		t.Fatal("match on a known block refused")
	}
	if diff := cmp.Diff([]Chain{{Worker: "w", Blocks: hs(1), Shared: 1}}, x.Lineage("t", "")); diff != "" {
		t.Fatal(diff)
	}
	if x.ApplyMatch("", "w", 1, t0) {
		t.Fatal("match without a session")
	}
	// Evicted from the worker: nothing to record any more.
	must(t, x.Apply("w", kv.Event{Kind: kv.Removed, Blocks: hs(2)}, t0))
	if x.ApplyMatch("u", "w", 2, t0) {
		t.Fatal("match on an evicted block")
	}
	if st := x.Stats(); st.RejectedUpdates != 0 {
		t.Fatalf("refusals counted as rejected updates: %+v", st)
	}
}

// A chain reported leaf first grafts each new block above the chain built so
// far: joining the one-block path to the long one, not the long one to it,
// moves one node per graft (else the chain's whole length each time).
func TestGraftsRenumberTheShorterPath(t *testing.T) {
	const n = 1024
	x := New(Config{})
	must(t, x.UpdateFromStored("s", "w", 0, hs(n), time.Time{}))
	for i := uint64(n); i > 1; i-- {
		must(t, x.UpdateFromStored("s", "w", kv.BlockHash(i-1), hs(i), time.Time{}))
	}
	if x.renumbered > n {
		t.Fatalf("%d nodes renumbered putting together a chain of %d", x.renumbered, n)
	}
	if fs := x.Frontiers("s"); len(fs) != 1 || fs[0].Depth != n {
		t.Fatalf("frontiers %+v, want one at depth %d", fs, n)
	}
}
