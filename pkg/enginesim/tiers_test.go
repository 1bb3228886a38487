package enginesim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
)

// stepLoaded runs the step in which a request added with a prefix on a lower
// tier is admitted, which lasts as long as its load and computes nothing
// (transfer), then the step that computes its chunk, whose time is the
// engine's perf model of that chunk. It returns the request's output; each
// step's result goes to the optional observers first.
func stepLoaded(t *testing.T, e *Engine, transfer time.Duration, chunk PrefillChunk, observe ...func(StepResult)) (Output, []time.Duration) {
	t.Helper()
	var steps []time.Duration
	for i := 0; i < 2; i++ {
		res := e.Step()
		for _, f := range observe {
			f(res)
		}
		steps = append(steps, res.Duration)
		want := transfer
		if i == 1 {
			want = e.Config().Perf.StepTime(&Batch{Prefill: []PrefillChunk{chunk}})
		}
		if res.Duration != want {
			t.Fatalf("step %d took %v, want %v", i, res.Duration, want)
		}
		if i == 0 && len(res.Outputs) != 0 {
			t.Fatalf("the loading request computed before its KV arrived: %+v", res.Outputs)
		}
		if i == 1 {
			if len(res.Outputs) == 0 {
				t.Fatal("no output after the load")
			}
			return res.Outputs[0], steps
		}
	}
	panic("unreachable")
}

// fill runs one request to completion (1 output token).
func fill(t *testing.T, e *Engine, id, session string, prompt []uint32) runResult {
	t.Helper()
	if err := e.Add(Request{ID: id, SessionID: session, Prompt: prompt, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	return runToIdle(t, e)
}

func TestEvictedBlocksDemoteToHostAndLoadBack(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8, HostBlocks: 16})
	idx := newTierIndex()
	first := seq(0, 16) // 4 blocks
	r := fill(t, e, "a", "s1", first)
	must(t, idx.apply(r.events))
	// Another 31-token prompt needs 8 blocks: all of a's cached blocks go.
	r = fill(t, e, "b", "s2", seq(1000, 31))
	must(t, idx.apply(r.events))
	st := e.Stats()
	if st.Tiers[kv.TierHost].Resident != 4 || st.Evictions[kv.TierDevice] != 4 {
		t.Fatalf("after pressure: %+v evictions %v", st.Tiers, st.Evictions)
	}
	// Coming back, a's prefix is found on the host and loaded at transfer
	// cost: 3 blocks (the last is recomputed), 2 MiB each at 64 GB/s.
	if err := e.Add(Request{ID: "a2", SessionID: "s1", Prompt: first, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	var evs []kv.Event
	out, _ := stepLoaded(t, e, time.Duration(3*4*131072/64e9*1e9), PrefillChunk{NewTokens: 4, PrefixTokens: 12}, func(r StepResult) {
		must(t, idx.apply(r.Events))
		evs = append(evs, r.Events...)
	})
	if out.CachedTokens != 12 || out.Usage.CachedByTier[kv.TierHost] != 12 {
		t.Fatalf("host hit: cached %d, by tier %v", out.CachedTokens, out.Usage.CachedByTier)
	}
	must(t, idx.diff(e.contents()))
	for _, ev := range evs {
		if ev.Kind == kv.Stored && ev.Tier == kv.TierDevice && ev.SessionID != "s1" {
			t.Fatalf("loaded blocks stored without session: %+v", ev)
		}
	}
}

// A demotion (device to host, and host to disk when host is full) emits
// Stored below before Removed above: the block is never reported absent from
// both tiers, which is also what spares an index re-rooting its subtree.
func TestDemotionStoresBelowBeforeRemovingAbove(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8, HostBlocks: 4, DiskBlocks: 16})
	var evs []kv.Event
	for i := range 4 {
		r := fill(t, e, string(rune('a'+i)), "s", seq(1000*i, 31))
		evs = append(evs, r.events...)
	}
	storedAt := map[[2]int64]int{} // (tier, hash) → index of the latest Stored
	moves := 0
	for i, ev := range evs {
		for _, h := range ev.Blocks {
			switch ev.Kind {
			case kv.Stored:
				storedAt[[2]int64{int64(ev.Tier), int64(h)}] = i
			case kv.Removed:
				if ev.Tier == kv.TierDisk {
					continue
				}
				j, ok := storedAt[[2]int64{int64(ev.Tier + 1), int64(h)}]
				if !ok {
					t.Fatalf("event %d removes %x from tier %d before any Stored below", i, h, ev.Tier)
				}
				if j > i {
					t.Fatalf("Stored below (event %d) after Removed (event %d)", j, i)
				}
				moves++
			}
		}
	}
	if st := e.Stats(); moves == 0 || st.Evictions[kv.TierHost] == 0 {
		t.Fatalf("no demotion cascaded: %d moves, evictions %v", moves, st.Evictions)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestHints(t *testing.T) {
	newEngine := func(host int) (*Engine, *tierIndex) {
		e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 16, HostBlocks: host})
		idx := newTierIndex()
		r := fill(t, e, "a", "s1", seq(0, 16)) // 4 blocks cached for s1
		must(t, idx.apply(r.events))
		return e, idx
	}
	cfg := Config{BlockSize: 4}
	for _, tc := range []struct {
		name       string
		host       int
		setup      func(e *Engine)
		hint       Hint
		want       hints.Result
		wantBlocks int
		check      func(t *testing.T, e *Engine)
	}{
		{name: "demote session", host: 8, hint: Hint{Kind: hints.KindDemote, SessionID: "s1"}, want: hints.ResultAccepted, wantBlocks: 4,
			check: func(t *testing.T, e *Engine) {
				if st := e.Stats(); st.Tiers[kv.TierDevice].Resident != 0 || st.Tiers[kv.TierHost].Resident != 4 {
					t.Fatalf("%+v", st.Tiers)
				}
			}},
		{name: "demote bounded", host: 8, hint: Hint{Kind: hints.KindDemote, SessionID: "s1", MaxBlocks: 1}, want: hints.ResultClipped, wantBlocks: 1},
		{name: "demote without host tier", hint: Hint{Kind: hints.KindDemote, SessionID: "s1"}, want: hints.ResultRejected},
		{name: "demote unknown session", host: 8, hint: Hint{Kind: hints.KindDemote, SessionID: "nope"}, want: hints.ResultRejected},
		{name: "demote busy session", host: 8,
			setup: func(e *Engine) {
				must(t, e.Add(Request{ID: "busy", SessionID: "s1", Prompt: seq(0, 17), MaxTokens: 50, IgnoreEOS: true}))
				e.Step()
			},
			hint: Hint{Kind: hints.KindDemote, SessionID: "s1"}, want: hints.ResultDeferred,
			check: func(t *testing.T, e *Engine) {
				// Queued: once the turn finishes, its blocks go to the host,
				// and the step's events say so.
				idx := newTierIndex()
				must(t, idx.apply(e.Snapshot()))
				r := runToIdle(t, e)
				must(t, idx.apply(r.events))
				must(t, idx.diff(e.contents()))
				st := e.Stats()
				if st.DeferredHintsApplied != 1 || st.DeferredHints != 0 || st.Tiers[kv.TierHost].Resident < 4 {
					t.Fatalf("deferred demote: applied %d, queued %d, host %+v", st.DeferredHintsApplied, st.DeferredHints, st.Tiers[kv.TierHost])
				}
			}},
		{name: "prefetch back", host: 8,
			setup: func(e *Engine) { e.ApplyHint(Hint{Kind: hints.KindDemote, SessionID: "s1"}) },
			hint:  Hint{Kind: hints.KindPrefetch, SessionID: "s1"}, want: hints.ResultAccepted, wantBlocks: 4,
			check: func(t *testing.T, e *Engine) {
				if st := e.Stats(); st.Tiers[kv.TierDevice].Resident != 4 || st.LoadedBlocks != 4 {
					t.Fatalf("%+v loaded %d", st.Tiers, st.LoadedBlocks)
				}
				if e.linkFree[kv.TierHost] == 0 {
					t.Fatal("prefetch booked no transfer on the host link")
				}
			}},
		{name: "prefetch nothing demoted", host: 8, hint: Hint{Kind: hints.KindPrefetch, SessionID: "s1"}, want: hints.ResultRejected},
		{name: "share a foreign prefix", host: 0,
			hint: Hint{Kind: hints.KindShare, SessionID: "s9", Blocks: cfg.hasherFor(seq(500, 12))}, want: hints.ResultAccepted, wantBlocks: 3,
			check: func(t *testing.T, e *Engine) {
				// The imported prefix is a cache hit for the next request,
				// once its copy has landed.
				must(t, e.Add(Request{ID: "x", Prompt: seq(500, 14), MaxTokens: 1}))
				transfer := time.Duration(3 * 4 * 131072 / 64e9 * 1e9)
				if out, _ := stepLoaded(t, e, transfer, PrefillChunk{NewTokens: 2, PrefixTokens: 12}); out.CachedTokens != 12 {
					t.Fatalf("shared prefix not hit: %+v", out)
				}
			}},
		{name: "share bounded", hint: Hint{Kind: hints.KindShare, SessionID: "s9", Blocks: cfg.hasherFor(seq(500, 12)), MaxBlocks: 2}, want: hints.ResultClipped, wantBlocks: 2},
		{name: "share without blocks", hint: Hint{Kind: hints.KindShare, SessionID: "s1"}, want: hints.ResultRejected},
		{name: "release session", hint: Hint{Kind: hints.KindRelease, SessionID: "s1"}, want: hints.ResultAccepted, wantBlocks: 4,
			check: func(t *testing.T, e *Engine) {
				// s1's deepest block is now first in line for eviction (the
				// empty blocks are still reused before any cached one).
				f := e.pool.blk[e.pool.sentinelOf(queueCached)].next
				if !e.pool.blk[f].cached || e.pool.blk[f].session != e.sessionIdx["s1"] || e.pool.blk[f].pos != 3 {
					t.Fatalf("front of the eviction queue: block %d pos %d", f, e.pool.blk[f].pos)
				}
			}},
		{name: "unknown action", hint: Hint{Kind: 99}, want: hints.ResultRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, idx := newEngine(tc.host)
			if tc.setup != nil {
				tc.setup(e)
				// Setup's own events are not tracked here: resync from a
				// snapshot, as a subscriber would.
				idx = newTierIndex()
				must(t, idx.apply(e.Snapshot()))
			}
			o := e.ApplyHint(tc.hint)
			if o.Status != tc.want || (tc.wantBlocks > 0 && o.Blocks != tc.wantBlocks) {
				t.Fatalf("outcome %v (%d blocks, %q), want %v (%d blocks)", o.Status, o.Blocks, o.Reason, tc.want, tc.wantBlocks)
			}
			if o.Status != hints.ResultAccepted && o.Reason == "" {
				t.Fatalf("%v without a reason", o.Status)
			}
			must(t, idx.apply(o.Events))
			must(t, idx.diff(e.contents()))
			must(t, e.checkInvariants())
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}

func TestResetClearsEverything(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8, HostBlocks: 4})
	fill(t, e, "a", "", seq(0, 30))
	must(t, e.Add(Request{ID: "b", Prompt: seq(0, 5)}))
	if _, err := e.Reset(); err != ErrBusy {
		t.Fatalf("Reset with work in flight = %v", err)
	}
	e.Abort("b")
	evs, err := e.Reset()
	if err != nil || len(evs) != 1 || evs[0].Kind != kv.Cleared {
		t.Fatalf("Reset = %v, %v", evs, err)
	}
	if st := e.Stats(); st.Tiers[kv.TierDevice].Resident != 0 || st.Tiers[kv.TierHost].Resident != 0 {
		t.Fatalf("after reset: %+v", st.Tiers)
	}
	must(t, e.checkInvariants())
}

func TestSnapshotIsChainsRootFirst(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 32})
	fill(t, e, "a", "s1", seq(0, 17))                        // 4 blocks
	fill(t, e, "b", "s1", append(seq(0, 8), seq(100, 9)...)) // shares 2, adds 2
	fill(t, e, "c", "s2", seq(500, 9))                       // another root, 2 blocks
	snap := e.Snapshot()
	h := Config{BlockSize: 4}.hasherFor
	a, b, c := h(seq(0, 17)), h(append(seq(0, 8), seq(100, 9)...)), h(seq(500, 9))
	// Three events: the shared root chain continued by one branch (the
	// child with the smaller hash comes first), the other branch, c's chain.
	first, second := a, b
	if b[2] < a[2] {
		first, second = b, a
	}
	want := map[kv.BlockHash]kv.Event{
		first[0]:  {Kind: kv.Stored, Blocks: first[:4], SessionID: "s1"},
		second[2]: {Kind: kv.Stored, Parent: a[1], Blocks: second[2:4], SessionID: "s1"},
		c[0]:      {Kind: kv.Stored, Blocks: c[:2], SessionID: "s2"},
	}
	if len(snap) != len(want) {
		t.Fatalf("snapshot has %d events, want %d: %+v", len(snap), len(want), snap)
	}
	for _, ev := range snap {
		if diff := cmp.Diff(want[ev.Blocks[0]], ev); diff != "" {
			t.Errorf("event (-want +got):\n%s", diff)
		}
	}
}

// Blocks a prefetch is still copying in are on the device only when the
// copy lands: a request that finds them earlier waits for them, as the
// request that starts a load waits for its own.
func TestBlocksInFlightAreWaitedFor(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 16, HostBlocks: 8})
	prompt := seq(0, 16)
	fill(t, e, "a", "s1", prompt)
	if o := e.ApplyHint(Hint{Kind: hints.KindDemote, SessionID: "s1"}); o.Status != hints.ResultAccepted {
		t.Fatalf("demote: %+v", o)
	}
	if o := e.ApplyHint(Hint{Kind: hints.KindPrefetch, SessionID: "s1"}); o.Status != hints.ResultAccepted {
		t.Fatalf("prefetch: %+v", o)
	}
	must(t, e.Add(Request{ID: "a2", SessionID: "s1", Prompt: prompt, MaxTokens: 1}))
	// The prefetch copies all 4 blocks; the request needs 3 of them, found
	// on the device, and computes after the 4 have landed.
	out, _ := stepLoaded(t, e, time.Duration(4*4*131072/64e9*1e9), PrefillChunk{NewTokens: 4, PrefixTokens: 12})
	if out.Usage.CachedByTier[kv.TierDevice] != 12 {
		t.Fatalf("a2 cached %v", out.Usage.CachedByTier)
	}
}

// A request admitted beside one that is loading a prefix from the host
// finds those blocks on the device, still in flight, and computes only once
// they have landed, as the loading request does.
func TestAnotherRequestsLoadIsWaitedFor(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 16, HostBlocks: 16, TransferBandwidth: 1e8})
	first := seq(0, 16)
	fill(t, e, "a", "s1", first)
	fill(t, e, "b", "s2", seq(1000, 63)) // pushes a's blocks to the host
	must(t, e.Add(Request{ID: "a2", SessionID: "s1", Prompt: first, MaxTokens: 1}))
	must(t, e.Add(Request{ID: "c", SessionID: "s3", Prompt: first, MaxTokens: 1}))
	transfer := time.Duration(3 * 4 * 131072 / 1e8 * 1e9) // a2 loads 3 host blocks
	var clock time.Duration
	done := map[string]time.Duration{}
	for step := 0; len(done) < 2; step++ {
		if !e.HasWork() {
			t.Fatalf("drained with %v done", done)
		}
		res := e.Step()
		if step == 0 && res.Duration >= transfer {
			// Else computing in the first step would pass unseen.
			t.Fatalf("the first step took %v, no less than the %v load", res.Duration, transfer)
		}
		clock += res.Duration
		for _, o := range res.Outputs {
			done[o.RequestID] = clock
			if o.RequestID == "c" && o.Usage.CachedByTier[kv.TierDevice] != 12 {
				t.Errorf("c cached %v: want its prefix as device hits", o.Usage.CachedByTier)
			}
		}
	}
	for id, at := range done {
		if at < transfer {
			t.Errorf("%s computed after %v, before the %v load it needs could land", id, at, transfer)
		}
	}
}

// A block a prefetch was still copying in, evicted and reused for content
// computed here, is on the device as soon as that content is: the copy's
// landing time goes with the old content.
func TestReusedBlockForgetsTheCopyInFlight(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8, HostBlocks: 8, TransferBandwidth: 1e6})
	fill(t, e, "a", "s1", seq(0, 16))
	e.ApplyHint(Hint{Kind: hints.KindDemote, SessionID: "s1"})
	if o := e.ApplyHint(Hint{Kind: hints.KindPrefetch, SessionID: "s1"}); o.Status != hints.ResultAccepted {
		t.Fatalf("prefetch: %+v", o) // 4 blocks over a 1 MB/s link: 2 s
	}
	lands := time.Duration(4 * 4 * 131072 / 1e6 * 1e9)
	other := seq(1000, 31) // all 8 blocks with its answer: the prefetched ones are reused
	r := fill(t, e, "x", "s2", other)
	var clock time.Duration
	for _, st := range r.steps {
		clock += st.Duration
	}
	if clock >= lands {
		t.Fatalf("x took %v, past the prefetch's landing at %v: nothing left to wait for", clock, lands)
	}
	if st := e.Stats(); st.Tiers[kv.TierDevice].Resident != 7 { // x's 7 full blocks, none of a's
		t.Fatalf("x did not take the prefetched blocks: %+v, evictions %v", st.Tiers, st.Evictions)
	}
	must(t, e.Add(Request{ID: "y", SessionID: "s2", Prompt: other, MaxTokens: 1}))
	res := e.Step()
	if len(res.Outputs) == 0 || res.Outputs[0].CachedTokens != 28 {
		t.Fatalf("y waited or missed x's blocks (%v after x's %v): %+v", res.Duration, clock, res.Outputs)
	}
}

// A load from a lower tier runs beside the steps: the other requests keep
// decoding at their own pace while it is in flight, and the loading request
// joins the batch once its KV has landed.
func TestTierLoadOverlapsOtherRequestsCompute(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 16, HostBlocks: 16, TransferBandwidth: 1e8})
	first := seq(0, 16)
	fill(t, e, "a", "s1", first)
	fill(t, e, "b", "s2", seq(1000, 63)) // pushes a's blocks to the host
	if st := e.Stats(); st.Tiers[kv.TierHost].Resident == 0 {
		t.Fatalf("nothing demoted: %+v", st.Tiers)
	}
	must(t, e.Add(Request{ID: "x", SessionID: "s3", Prompt: seq(5000, 8), MaxTokens: 30, IgnoreEOS: true}))
	e.Step() // x's prefill
	must(t, e.Add(Request{ID: "a2", SessionID: "s1", Prompt: first, MaxTokens: 1}))
	transfer := time.Duration(3 * 4 * 131072 / 1e8 * 1e9) // 3 host blocks over the slow link
	var clock time.Duration
	for {
		res := e.Step()
		clock += res.Duration
		done := false
		for _, o := range res.Outputs {
			if o.RequestID == "a2" {
				done = true
				if o.Usage.CachedByTier[kv.TierHost] != 12 {
					t.Fatalf("a2 cached %v", o.Usage.CachedByTier)
				}
			}
		}
		if res.Duration >= transfer {
			t.Fatalf("a step took %v: the %v load was charged to the step", res.Duration, transfer)
		}
		if done {
			break
		}
		if len(res.Outputs) == 0 {
			t.Fatal("x stopped decoding while a2 was loading")
		}
	}
	if clock < transfer {
		t.Fatalf("a2 computed after %v, before its %v load could land", clock, transfer)
	}
}

// Each GPU of a tensor-parallel worker has its own link and holds its share
// of a block: a load over TP links takes 1/TP of the time.
func TestTransfersSplitOverTensorParallelLinks(t *testing.T) {
	one := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8, HostBlocks: 8})
	four := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8, HostBlocks: 8, TensorParallelSize: 4})
	if a, b := one.transferTime(kv.TierHost, 12), four.transferTime(kv.TierHost, 12); a == 0 || b != a/4 {
		t.Fatalf("12 blocks: %v over one link, %v over four", a, b)
	}
}

// A copy booked while the engine is idle starts when the driver says it is
// (Advance), so a load long after it does not queue behind it.
func TestAdvanceMovesTheLinksOfAnIdleEngine(t *testing.T) {
	setup := func() *Engine {
		e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 16, HostBlocks: 32, TransferBandwidth: 1e8})
		fill(t, e, "a", "s1", seq(0, 16))
		fill(t, e, "b", "s2", seq(100, 16))
		e.ApplyHint(Hint{Kind: hints.KindDemote, SessionID: "s1"})
		e.ApplyHint(Hint{Kind: hints.KindDemote, SessionID: "s2"})
		if o := e.ApplyHint(Hint{Kind: hints.KindPrefetch, SessionID: "s1"}); o.Blocks == 0 {
			t.Fatalf("prefetch moved nothing: %+v", o)
		}
		return e
	}
	load := func(e *Engine) time.Duration {
		must(t, e.Add(Request{ID: "b2", SessionID: "s2", Prompt: seq(100, 16), MaxTokens: 1}))
		return e.Step().Duration // s2's blocks come back from the host
	}
	own := setup().transferTime(kv.TierHost, 3) // the last block is computed, not loaded
	if d := load(setup()); d <= own {
		t.Fatalf("right after the prefetch the load waited %v, not behind it (own copy %v)", d, own)
	}
	e := setup()
	e.Advance(10 * time.Second)
	if d := load(e); d != own {
		t.Fatalf("10 s after the prefetch the load waited %v, want its own copy %v", d, own)
	}
}
