package hints

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// What the engines behind a shim announce (enginesim.Engine.HintSupport,
// adapter.Backend.HintSupport).
var (
	simSupport = Support{Known: true, Caps: []Capability{{Kind: KindShare}, {Kind: KindPrefetch}, {Kind: KindDemote}, {Kind: KindRelease}}}
	sglang     = Support{Known: true, Caps: []Capability{{Kind: KindRetain, MaxPriority: 99, NextRequests: true}, {Kind: KindRelease, NextRequests: true}}}
	plainVLLM  = Support{Known: true}
)

// A retain priority of 0, the bottom of the 0..100 scale, is sent as set,
// not replaced by the default.
func TestNearestKeepsRetainPriorityZero(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RetainPriority = 0
	demote := Action{Policy: PolicyDemotePaused, Kind: KindDemote, Worker: "w", Session: "s", Blocks: hs(1), ToTier: kv.TierHost}
	if got, ok := Nearest(demote, sglang, cfg); !ok || got.Kind != KindRetain || got.Priority != 0 {
		t.Fatalf("%+v, %v: want a retain at priority 0", got, ok)
	}
}

func TestNearest(t *testing.T) {
	cfg := DefaultConfig()
	demote := Action{Policy: PolicyDemotePaused, Kind: KindDemote, Worker: "w", Session: "s", Blocks: hs(1, 2, 3), ToTier: kv.TierHost}
	prefetch := Action{Policy: PolicyPrefetchResume, Kind: KindPrefetch, Worker: "w", Session: "s", Blocks: hs(1, 2, 3), ToTier: kv.TierDevice}
	share := Action{Policy: PolicyShareSubagent, Kind: KindShare, Worker: "w", Session: "s", Blocks: hs(1, 2, 3), SourceWorker: "v"}
	release := Action{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: "w", Session: "s"}
	retain := Action{Policy: PolicyDemotePaused, Kind: KindRetain, Worker: "w", Session: "s", Priority: 50, TTL: 5 * time.Minute}
	tests := []struct {
		name string
		a    Action
		s    Support
		want Action
		ok   bool
	}{
		{"unannounced: as proposed", demote, Support{}, demote, true},
		{"simulator: demote", demote, simSupport, demote, true},
		{"simulator: prefetch", prefetch, simSupport, prefetch, true},
		{"simulator: share", share, simSupport, share, true},
		{"simulator without host tier: no demote, nothing near", demote, Support{Known: true, Caps: []Capability{{Kind: KindShare}, {Kind: KindRelease}}}, demote, false},
		{"SGLang: a retain for the session in place of a demote", demote, sglang, retain, true},
		{"SGLang: nothing near a prefetch", prefetch, sglang, prefetch, false},
		{"SGLang: nothing near a share", share, sglang, share, false},
		{"SGLang: release", release, sglang, release, true},
		{"vLLM without retention: nothing", demote, plainVLLM, demote, false},
		{"vLLM without retention: no release either", release, plainVLLM, release, false},
		{"a demote bounded by the engine keeps the deepest blocks", demote,
			Support{Known: true, Caps: []Capability{{Kind: KindDemote, MaxBlocks: 2}}},
			Action{Policy: PolicyDemotePaused, Kind: KindDemote, Worker: "w", Session: "s", Blocks: hs(2, 3), ToTier: kv.TierHost}, true},
		{"a share bounded by the engine keeps the root", share,
			Support{Known: true, Caps: []Capability{{Kind: KindShare, MaxBlocks: 2}}},
			Action{Policy: PolicyShareSubagent, Kind: KindShare, Worker: "w", Session: "s", Blocks: hs(1, 2), SourceWorker: "v"}, true},
		{"a retain within the engine's scale and lease", Action{Kind: KindRetain, Session: "s", Blocks: hs(1), Priority: 100},
			Support{Known: true, Caps: []Capability{{Kind: KindRetain, MaxPriority: 99, MaxTTL: time.Minute}}},
			Action{Kind: KindRetain, Session: "s", Blocks: hs(1), Priority: 99, TTL: time.Minute}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Nearest(tt.a, tt.s, cfg)
			if ok != tt.ok {
				t.Fatalf("ok %v, want %v", ok, tt.ok)
			}
			if ok {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Fatalf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestActionTypes(t *testing.T) {
	for _, k := range kinds {
		if got, ok := KindOf(k.ActionType()); !ok || got != k {
			t.Errorf("%v: KindOf(%q) = %v, %v", k, k.ActionType(), got, ok)
		}
	}
	if k, ok := KindOf("kv.retain@1"); !ok || k != KindRetain {
		t.Errorf("kv.retain@1: %v %v", k, ok)
	}
	for _, s := range []string{"kv.pin@1", "kv.demote@2", ""} {
		if _, ok := KindOf(s); ok {
			t.Errorf("%q known", s)
		}
	}
}

// fleetView is a BatchView and SupportView over a real index, counting its
// reads.
type fleetView struct {
	*view
	support      map[string]Support
	batches      [][]LineageQuery
	singleLookup int
}

func (v *fleetView) Lineage(s, w string) ([]sessionindex.Chain, error) {
	v.singleLookup++
	return v.view.Lineage(s, w)
}

func (v *fleetView) Lineages(qs []LineageQuery) ([][]sessionindex.Chain, error) {
	v.batches = append(v.batches, qs)
	out := make([][]sessionindex.Chain, len(qs))
	for i, q := range qs {
		out[i] = v.idx.Lineage(q.Session, q.Worker)
	}
	return out, nil
}

func (v *fleetView) HintSupport(w string) Support { return v.support[w] }

func TestDecideReadsLineageOnceARound(t *testing.T) {
	idx := sessionindex.New(sessionindex.Config{})
	_ = idx.UpdateFromStored("p", "w0", 0, hs(1, 2, 5, 6), t0)
	_ = idx.UpdateFromStored("t", "w0", 2, hs(30, 31), t0) // shares 1-2 with p
	_ = idx.UpdateFromStored("u", "w1", 0, hs(40, 41), t0)
	v := &fleetView{view: &view{idx: idx}}
	e := New(Config{DemoteMinKVUsage: 0})
	for _, s := range []struct{ s, w string }{{"p", "w0"}, {"t", "w0"}, {"u", "w1"}} {
		e.Observe(t0, reasoning(s.s, s.w))
	}
	e.Observe(t0, Program{Session: "t", Lifecycle: LifecyclePaused, Phase: PhaseActing})
	e.Observe(t0, Program{Session: "u", Lifecycle: LifecyclePaused, Phase: PhaseActing})
	e.Observe(t0, Program{Session: "p", Lifecycle: LifecycleTerminated})
	got := e.Decide(t0, v)
	want := []Action{
		{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: "w0", Session: "p"},
		// Chain.Shared, not a comparison with p's chain, spares 1-2.
		{Policy: PolicyDemotePaused, Kind: KindDemote, Worker: "w0", Session: "t", Blocks: hs(30, 31), ToTier: kv.TierHost},
		{Policy: PolicyDemotePaused, Kind: KindDemote, Worker: "w1", Session: "u", Blocks: hs(40, 41), ToTier: kv.TierHost},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if len(v.batches) != 1 || len(v.batches[0]) != 3 || v.singleLookup != 0 {
		t.Fatalf("reads: batches %v, single lookups %d; want one batch of 3", v.batches, v.singleLookup)
	}
	if e.Decide(t0.Add(time.Second), v); len(v.batches) != 1 {
		t.Fatalf("a round with nothing to decide read lineage: %v", v.batches[1:])
	}
}

// On an engine that retains but cannot demote (SGLang), a paused program's
// demote becomes a retain of the session, nothing is prefetched when it
// resumes (nothing moved), and its release goes out when it ends. An engine
// that acts on nothing (vLLM without retention) is sent nothing.
func TestDecideSendsWhatTheEngineActsOn(t *testing.T) {
	idx := sessionindex.New(sessionindex.Config{})
	_ = idx.UpdateFromStored("s", "w0", 0, hs(1, 2, 3), t0)
	_ = idx.UpdateFromStored("q", "w1", 0, hs(7, 8), t0)
	v := &fleetView{view: &view{idx: idx}, support: map[string]Support{"w0": sglang, "w1": plainVLLM}}
	cfg := DefaultConfig()
	cfg.Disabled = nil
	e := New(cfg)
	e.Observe(t0, acting("s", "w0", 0))
	e.Observe(t0, acting("q", "w1", 0))
	e.Observe(t0, Program{Session: "s", Lifecycle: LifecyclePaused, Phase: PhaseActing})
	e.Observe(t0, Program{Session: "q", Lifecycle: LifecyclePaused, Phase: PhaseActing})
	got := e.Decide(t0, v)
	want := []Action{{Policy: PolicyDemotePaused, Kind: KindRetain, Worker: "w0", Session: "s", Priority: cfg.RetainPriority, TTL: cfg.RetainTTL}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("pause (-want +got):\n%s", diff)
	}
	for _, a := range got {
		e.Outcome(a, ResultDeferred)
	}
	if st := e.Stats(); st.Unsupported != 1 || st.Sent != 1 {
		t.Fatalf("stats %+v: want 1 sent, 1 unsupported (q's demote to w1)", st)
	}
	// Resumed: nothing to bring back, and no second decision for the pause.
	e.Observe(t0.Add(time.Second), acting("s", "w0", 0))
	e.Observe(t0.Add(time.Second), acting("q", "w1", 0))
	if got := e.Decide(t0.Add(2*time.Second), v); len(got) != 0 {
		t.Fatalf("after resume: %v", got)
	}
	e.Observe(t0.Add(3*time.Second), Program{Session: "s", Lifecycle: LifecycleTerminated})
	e.Observe(t0.Add(3*time.Second), Program{Session: "q", Lifecycle: LifecycleTerminated})
	got = e.Decide(t0.Add(3*time.Second), v)
	want = []Action{{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: "w0", Session: "s"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("release (-want +got):\n%s", diff)
	}
	if st := e.Stats(); st.Programs != 0 {
		t.Fatalf("%d programs left", st.Programs)
	}
}

// A retain that never reached the engine is proposed again, like the demote
// it stands for.
func TestUndeliveredRetainIsRetried(t *testing.T) {
	idx := sessionindex.New(sessionindex.Config{})
	_ = idx.UpdateFromStored("s", "w0", 0, hs(1, 2), t0)
	v := &fleetView{view: &view{idx: idx}, support: map[string]Support{"w0": sglang}}
	e := New(Config{})
	e.Observe(t0, acting("s", "w0", 0))
	e.Observe(t0, Program{Session: "s", Lifecycle: LifecyclePaused, Phase: PhaseActing})
	first := e.Decide(t0, v)
	if len(first) != 1 || first[0].Kind != KindRetain {
		t.Fatalf("first %v", first)
	}
	e.Outcome(first[0], ResultError)
	if again := e.Decide(t0.Add(time.Second), v); cmp.Diff(first, again) != "" {
		t.Fatalf("retry %v, want %v", again, first)
	}
}
