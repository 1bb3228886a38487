package hints

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

var t0 = time.Unix(1_700_000_000, 0)

// view serves lineage from a real session index and load from a map.
type view struct {
	idx   *sessionindex.Index
	usage map[string]float64
	fail  bool
}

func (v *view) Lineage(s, w string) ([]sessionindex.Chain, error) {
	if v.fail {
		return nil, errors.New("indexer down")
	}
	return v.idx.Lineage(s, w), nil
}

func (v *view) KVUsage(w string) (float64, bool) {
	u, ok := v.usage[w]
	return u, ok
}

func hs(v ...uint64) []kv.BlockHash {
	out := make([]kv.BlockHash, len(v))
	for i, x := range v {
		out[i] = kv.BlockHash(x)
	}
	return out
}

// step is one moment of a scenario: observe programs, then decide.
type step struct {
	at      time.Duration
	observe []Program
	outcome *struct {
		a Action
		r Result
	}
	want []Action
}

func acting(s, w string, since time.Duration) Program {
	return Program{Session: s, Phase: PhaseActing, Lifecycle: LifecycleActive, Worker: w, PhaseSince: t0.Add(since)}
}

func reasoning(s, w string) Program {
	return Program{Session: s, Phase: PhaseReasoning, Lifecycle: LifecycleActive, Worker: w}
}

func TestPolicies(t *testing.T) {
	lineage := func(x *sessionindex.Index) {
		// s: 21-22-23 on w0; p (parent): 1-2-5-6 on w0; c (child of p).
		_ = x.UpdateFromStored("s", "w0", 0, hs(21, 22, 23), t0)
		_ = x.UpdateFromStored("p", "w0", 0, hs(1, 2, 5, 6), t0)
		_ = x.UpdateFromStored("p", "w1", 0, hs(1, 2), t0)
		_ = x.UpdateFromStored("q", "w0", 0, hs(7, 8, 9), t0)
		_ = x.UpdateFromStored("t", "w0", 2, hs(30), t0) // shares 1-2 with p
		_ = x.UpdateFromStored("m", "w0", 0, hs(40, 41), t0)
		_ = x.UpdateFromStored("m", "w0", 0, hs(50, 51), t0) // a second chain
	}
	demote := func(policy string, blocks ...uint64) Action {
		return Action{Policy: policy, Kind: KindDemote, Worker: "w0", Session: "s", Blocks: hs(blocks...), ToTier: kv.TierHost}
	}
	tests := []struct {
		name  string
		cfg   Config
		usage map[string]float64
		fail  bool
		steps []step
	}{
		{
			name: "long tool call is demoted once, after the default threshold",
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: 5 * time.Second},
				{at: 6 * time.Second, want: []Action{demote(PolicyDemoteLongTool, 21, 22, 23)}},
				{at: 7 * time.Second},
			},
		},
		{
			name: "the prefix shared with other sessions stays",
			steps: []step{
				{at: 0, observe: []Program{acting("t", "w0", 0)}},
				{at: 10 * time.Second, want: []Action{{Policy: PolicyDemoteLongTool, Kind: KindDemote, Worker: "w0", Session: "t", Blocks: hs(30), ToTier: kv.TierHost}}},
			},
		},
		{
			name:  "no demote from a GPU with room",
			usage: map[string]float64{"w0": 0.2},
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: time.Minute},
			},
		},
		{
			name:  "demote under pressure, then prefetch when the next turn starts",
			usage: map[string]float64{"w0": 0.9},
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: 10 * time.Second, want: []Action{demote(PolicyDemoteLongTool, 21, 22, 23)}},
				{at: 11 * time.Second, observe: []Program{reasoning("s", "w0")}, want: []Action{
					{Policy: PolicyPrefetchResume, Kind: KindPrefetch, Worker: "w0", Session: "s", Blocks: hs(21, 22, 23), ToTier: kv.TierDevice},
				}},
				{at: 12 * time.Second},
			},
		},
		{
			name: "next turn on another worker shares from the old worker's host tier",
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: 10 * time.Second, want: []Action{demote(PolicyDemoteLongTool, 21, 22, 23)}},
				{at: 11 * time.Second, observe: []Program{reasoning("s", "w1")}, want: []Action{
					{Policy: PolicyPrefetchResume, Kind: KindShare, Worker: "w1", Session: "s", Blocks: hs(21, 22, 23), SourceWorker: "w0", SourceTier: kv.TierHost},
				}},
			},
		},
		{
			name: "a rejected demote is not prefetched",
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: 10 * time.Second, want: []Action{demote(PolicyDemoteLongTool, 21, 22, 23)},
					outcome: &struct {
						a Action
						r Result
					}{demote(PolicyDemoteLongTool, 21, 22, 23), ResultRejected}},
				{at: 11 * time.Second, observe: []Program{reasoning("s", "w0")}},
			},
		},
		{
			name: "paused by admission control: demote on its last worker, prefetch on resume",
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: time.Second, observe: []Program{{Session: "s", Phase: PhaseActing, Lifecycle: LifecyclePaused}},
					want: []Action{demote(PolicyDemotePaused, 21, 22, 23)}},
				{at: 20 * time.Second},
				{at: 21 * time.Second, observe: []Program{{Session: "s", Phase: PhaseActing, Lifecycle: LifecycleActive, Worker: "w0"}},
					want: []Action{{Policy: PolicyPrefetchResume, Kind: KindPrefetch, Worker: "w0", Session: "s", Blocks: hs(21, 22, 23), ToTier: kv.TierDevice}}},
				// Still in the same tool call: no second demote.
				{at: 40 * time.Second},
			},
		},
		{
			name: "sub-agent on another worker gets its parent's longest chain",
			steps: []step{
				{at: 0, observe: []Program{reasoning("p", "w0")}},
				{at: time.Second, observe: []Program{{Session: "c", Parent: "p", Phase: PhaseReasoning, Lifecycle: LifecycleActive, Worker: "w2"}},
					want: []Action{{Policy: PolicyShareSubagent, Kind: KindShare, Worker: "w2", Session: "c", Blocks: hs(1, 2, 5, 6), SourceWorker: "w0", SourceTier: kv.TierDevice}}},
				{at: 2 * time.Second},
			},
		},
		{
			name: "sub-agent share is capped to the parent's root",
			cfg:  Config{ShareMaxBlocks: 2},
			steps: []step{
				{at: 0, observe: []Program{reasoning("p", "w0"), {Session: "c", Parent: "p", Phase: PhaseReasoning, Lifecycle: LifecycleActive, Worker: "w2"}},
					want: []Action{{Policy: PolicyShareSubagent, Kind: KindShare, Worker: "w2", Session: "c", Blocks: hs(1, 2), SourceWorker: "w0", SourceTier: kv.TierDevice}}},
			},
		},
		{
			name: "sub-agent on its parent's worker needs nothing",
			steps: []step{
				{at: 0, observe: []Program{reasoning("p", "w0"), {Session: "c", Parent: "p", Phase: PhaseReasoning, Lifecycle: LifecycleActive, Worker: "w0"}}},
			},
		},
		{
			name: "a finished session is released on every worker of its lineage, before anything else",
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0), reasoning("p", "w0")}},
				{at: 10 * time.Second, observe: []Program{{Session: "p", Lifecycle: LifecycleTerminated}}, want: []Action{
					{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: "w0", Session: "p"},
					{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: "w1", Session: "p"},
					demote(PolicyDemoteLongTool, 21, 22, 23),
				}},
				{at: 11 * time.Second},
			},
		},
		{
			name: "rate limit holds hints back and sends them later",
			cfg:  Config{HintRate: 1, HintBurst: 1},
			steps: []step{
				{at: 0, observe: []Program{reasoning("p", "w0"), {Session: "p", Lifecycle: LifecycleTerminated}}, want: []Action{
					{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: "w0", Session: "p"},
					{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: "w1", Session: "p"},
				}},
				{at: 0, observe: []Program{acting("s", "w0", 0), acting("q", "w0", 0)}},
				// Both demotes are due; w0 has one token a second.
				{at: 10 * time.Second, want: []Action{{Policy: PolicyDemoteLongTool, Kind: KindDemote, Worker: "w0", Session: "q", Blocks: hs(7, 8, 9), ToTier: kv.TierHost}}},
				{at: 10 * time.Second},
				{at: 11 * time.Second, want: []Action{demote(PolicyDemoteLongTool, 21, 22, 23)}},
			},
		},
		{
			name: "block budget throttles a big demote until it refills",
			cfg:  Config{BlockRate: 1, BlockBurst: 3, HintRate: 100, HintBurst: 100},
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0), acting("q", "w0", 0)}},
				{at: 10 * time.Second, want: []Action{{Policy: PolicyDemoteLongTool, Kind: KindDemote, Worker: "w0", Session: "q", Blocks: hs(7, 8, 9), ToTier: kv.TierHost}}},
				{at: 12 * time.Second},
				{at: 13 * time.Second, want: []Action{demote(PolicyDemoteLongTool, 21, 22, 23)}},
			},
		},
		{
			// m has two chains on w0: a budget that fits one chain but not
			// both holds the demote back whole, and sends both chains once
			// it refills, instead of one chain now and the other never.
			name: "a program's chains go out together once the budget allows",
			cfg:  Config{BlockRate: 1, BlockBurst: 4, HintRate: 100, HintBurst: 100},
			steps: []step{
				{at: 0, observe: []Program{acting("q", "w0", 0)}},
				{at: 10 * time.Second, want: []Action{{Policy: PolicyDemoteLongTool, Kind: KindDemote, Worker: "w0", Session: "q", Blocks: hs(7, 8, 9), ToTier: kv.TierHost}}},
				{at: 10 * time.Second, observe: []Program{acting("m", "w0", 0)}},
				{at: 11 * time.Second}, // room for one chain (2 blocks), not both
				{at: 12 * time.Second},
				{at: 13 * time.Second, want: []Action{
					{Policy: PolicyDemoteLongTool, Kind: KindDemote, Worker: "w0", Session: "m", Blocks: hs(40, 41), ToTier: kv.TierHost},
					{Policy: PolicyDemoteLongTool, Kind: KindDemote, Worker: "w0", Session: "m", Blocks: hs(50, 51), ToTier: kv.TierHost},
				}},
			},
		},
		{
			name: "disabled policy never fires",
			cfg:  Config{Disabled: []string{PolicyDemoteLongTool}},
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: time.Minute},
			},
		},
		{
			name: "indexer down: nothing now",
			fail: true,
			steps: []step{
				{at: 0, observe: []Program{acting("s", "w0", 0)}},
				{at: time.Minute},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx := sessionindex.New(sessionindex.Config{})
			lineage(idx)
			v := &view{idx: idx, usage: tt.usage, fail: tt.fail}
			cfg := tt.cfg
			if reflect.ValueOf(cfg).IsZero() {
				// The defaults, with every policy on.
				cfg = DefaultConfig()
				cfg.Disabled = nil
			}
			e := New(cfg)
			for i, st := range tt.steps {
				now := t0.Add(st.at)
				for _, p := range st.observe {
					e.Observe(now, p)
				}
				got := e.Decide(now, v)
				if diff := cmp.Diff(st.want, got); diff != "" {
					t.Fatalf("step %d (%v): actions (-want +got):\n%s", i, st.at, diff)
				}
				if st.outcome != nil {
					e.Outcome(st.outcome.a, st.outcome.r)
				}
			}
		})
	}
}

func TestDefaultsLeaveLongToolDemoteOff(t *testing.T) {
	for _, p := range New(Config{}).Policies() {
		if p.Enabled != (p.Name != PolicyDemoteLongTool) {
			t.Errorf("policy %s enabled=%v", p.Name, p.Enabled)
		}
	}
}

func TestUndeliveredHintsAreRetried(t *testing.T) {
	idx := sessionindex.New(sessionindex.Config{})
	_ = idx.UpdateFromStored("s", "w0", 0, hs(1, 2), t0)
	_ = idx.UpdateFromStored("p", "w0", 0, hs(1, 5), t0)
	v := &view{idx: idx}
	e := New(Config{HintRate: 1, HintBurst: 1})
	e.Observe(t0, acting("s", "w0", 0))
	e.Observe(t0, reasoning("p", "w0"))
	e.Observe(t0, Program{Session: "c", Parent: "p", Phase: PhaseReasoning, Lifecycle: LifecycleActive, Worker: "w1"})
	at := t0.Add(time.Minute)
	first := e.Decide(at, v)
	if len(first) != 2 {
		t.Fatalf("first round %v", first)
	}
	for _, a := range first {
		e.Outcome(a, ResultError)
	}
	// Too soon for the rate limit: nothing; a second later both again.
	if got := e.Decide(at, v); len(got) != 0 {
		t.Fatalf("retried inside the rate limit: %v", got)
	}
	again := e.Decide(at.Add(time.Second), v)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Fatalf("retry (-first +again):\n%s", diff)
	}
	// Delivered now: done for good.
	for _, a := range again {
		e.Outcome(a, ResultAccepted)
	}
	if got := e.Decide(at.Add(time.Hour/2), v); len(got) != 0 {
		t.Fatalf("sent twice: %v", got)
	}
}

// wireView drops Chain.Shared, as lineage fetched over gRPC has none.
type wireView struct{ *view }

func (v wireView) Lineage(s, w string) ([]sessionindex.Chain, error) {
	cs, err := v.view.Lineage(s, w)
	for i := range cs {
		cs[i].Shared = 0
	}
	return cs, err
}

func TestDemoteSparesPrefixOfLivePrograms(t *testing.T) {
	idx := sessionindex.New(sessionindex.Config{})
	_ = idx.UpdateFromStored("p", "w0", 0, hs(1, 2, 5, 6), t0)
	_ = idx.UpdateFromStored("t", "w0", 2, hs(30, 31), t0)
	e := New(Config{DemoteMinKVUsage: 0})
	e.Observe(t0, reasoning("p", "w0"))
	e.Observe(t0, Program{Session: "t", Lifecycle: LifecyclePaused, Phase: PhaseActing})
	e.Observe(t0, reasoning("t", "w0")) // placed once…
	e.Observe(t0, Program{Session: "t", Lifecycle: LifecyclePaused, Phase: PhaseActing})
	got := e.Decide(t0, wireView{&view{idx: idx}})
	want := []Action{{Policy: PolicyDemotePaused, Kind: KindDemote, Worker: "w0", Session: "t", Blocks: hs(30, 31), ToTier: kv.TierHost}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestResyncForgetsProgramsNotLive(t *testing.T) {
	e := New(DefaultConfig())
	now := time.Unix(1_700_000_000, 0)
	for _, s := range []string{"a", "b", "c"} {
		e.Observe(now, Program{Session: s, Worker: "w", Phase: PhaseReasoning, Lifecycle: LifecycleActive})
	}
	if n := e.Resync(map[string]bool{"b": true, "z": true}); n != 2 {
		t.Fatalf("forgot %d, want 2", n)
	}
	if got := e.Stats().Programs; got != 1 {
		t.Fatalf("%d programs left, want 1 (b)", got)
	}
	if _, ok := e.programs["b"]; !ok {
		t.Fatal("b forgotten")
	}
}

// With the defaults no enabled policy follows a turn's phases, so the
// engine does not watch them; turning demote_long_tool_call on makes it
// watch every change.
func TestUnwatchedFollowsTheEnabledPolicies(t *testing.T) {
	def := New(DefaultConfig())
	if got, want := DefaultConfig().Unwatched(), []string{"reasoning", "acting"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults: unwatched %v, want %v", got, want)
	}
	if def.Watches("reasoning") || def.Watches("acting") || !def.Watches("placed") || !def.Watches("paused") {
		t.Fatal("defaults: watches a turn's phase changes, or not a placement or pause")
	}
	all := Config{Disabled: []string{}} // every policy on, demote_long_tool_call too
	if got := all.Unwatched(); got != nil {
		t.Fatalf("every policy on: unwatched %v, want none", got)
	}
	if e := New(all); !e.Watches("reasoning") || !e.Watches("acting") {
		t.Fatal("every policy on: a turn's phase changes unwatched")
	}
	// An ACTING program seen REASONING 40 s later (a pause and a move, as
	// the unwatched engine hears it) is one tool call only to an engine
	// that hears every phase change.
	for _, c := range []struct {
		cfg  Config
		want int
	}{{DefaultConfig(), 0}, {all, 1}} {
		e := New(c.cfg)
		e.Observe(t0, acting("a", "w0", 0))
		e.Observe(t0.Add(40*time.Second), reasoning("a", "w1"))
		if got := e.Stats().ToolSamples; got != c.want {
			t.Errorf("unwatched %v: %d tool calls timed, want %d", c.cfg.Unwatched(), got, c.want)
		}
	}
}

// While the phases are unwatched an active program is not heard of between
// its placements, so ForgetAfter's silence forgets only a paused one;
// watching them, both.
func TestForgetAfterSparesActiveProgramsWhenPhasesAreUnwatched(t *testing.T) {
	v := &view{idx: sessionindex.New(sessionindex.Config{})}
	for _, c := range []struct {
		name string
		cfg  Config
		left int
	}{{"defaults", DefaultConfig(), 1}, {"every policy on", Config{Disabled: []string{}}, 0}} {
		e := New(c.cfg)
		e.Observe(t0, reasoning("a", "w0"))
		e.Observe(t0, Program{Session: "p", Lifecycle: LifecyclePaused, Phase: PhaseActing})
		e.Decide(t0.Add(2*time.Hour), v)
		if got := e.Stats().Programs; got != c.left {
			t.Errorf("%s: %d programs left after two silent hours, want %d", c.name, got, c.left)
		}
		if _, ok := e.programs["a"]; c.left == 1 && !ok {
			t.Errorf("%s: the active program was forgotten", c.name)
		}
	}
}
