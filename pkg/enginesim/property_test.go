package enginesim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
)

// workload drives an engine with random agent-shaped traffic: sessions whose
// turns extend the previous turn's prompt and output, a shared system
// prompt, aborts, hints and resets.
type workload struct {
	t       testing.TB
	e       *Engine
	rng     *rand.Rand
	index   *tierIndex
	next    int
	system  []uint32
	turns   map[string][]uint32 // session → last full context
	pending map[string]string   // request id → session
	outputs map[string][]uint32
	trace   []string // what happened, for determinism checks
	checks  bool
	// onEvents, when set, sees every batch of events the engine returns.
	onEvents func([]kv.Event)
}

func newWorkload(t testing.TB, cfg Config, seed uint64, checks bool) *workload {
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &workload{
		t: t, e: e, rng: rand.New(rand.NewPCG(seed, 7)), index: newTierIndex(),
		turns: map[string][]uint32{}, pending: map[string]string{}, outputs: map[string][]uint32{},
		checks: checks,
	}
	w.system = w.tokens(3 * cfg.BlockSize)
	return w
}

func (w *workload) tokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(w.rng.IntN(50))
	}
	return out
}

func (w *workload) apply(evs []kv.Event) {
	w.t.Helper()
	for _, ev := range evs {
		w.trace = append(w.trace, fmt.Sprintf("ev %v %v %x %v %q", ev.Kind, ev.Tier, ev.Parent, ev.Blocks, ev.SessionID))
	}
	if err := w.index.apply(evs); err != nil {
		w.t.Fatal(err)
	}
	if w.onEvents != nil {
		w.onEvents(evs)
	}
}

func (w *workload) check() {
	w.t.Helper()
	if !w.checks {
		return
	}
	if err := w.e.checkInvariants(); err != nil {
		w.t.Fatal(err)
	}
	if err := w.index.diff(w.e.contents()); err != nil {
		w.t.Fatalf("index from events != cache: %v", err)
	}
}

func (w *workload) add() {
	sessions := 6
	sess := fmt.Sprintf("s%d", w.rng.IntN(sessions))
	for _, s := range w.pending {
		if s == sess {
			return // one turn at a time per session, like an agent
		}
	}
	prompt := w.turns[sess]
	if prompt == nil || w.rng.IntN(8) == 0 {
		prompt = append([]uint32(nil), w.system...)
	}
	prompt = append(append([]uint32(nil), prompt...), w.tokens(1+w.rng.IntN(40))...)
	id := fmt.Sprintf("r%d", w.next)
	w.next++
	r := Request{ID: id, SessionID: sess, Prompt: prompt, MaxTokens: 1 + w.rng.IntN(40), Seed: int64(w.next)}
	switch w.rng.IntN(6) {
	case 0:
		r.ToolCall = []uint32{7, 8, 9}
	case 1:
		r.StopTokenIDs = []uint32{1003}
	}
	if w.next%3 == 0 { // some retained, briefly or for good (not drawn: the draws stay as they were)
		r.Retain = []time.Duration{time.Millisecond, time.Hour}[w.next%2]
	}
	switch w.rng.IntN(4) {
	case 0:
		r.BlockHashes = w.e.Config().hasherFor(prompt)
	case 1:
		r.HashSeed = 12345 // another tenant: never shares blocks with the rest
	}
	if err := w.e.Add(r); err != nil {
		w.trace = append(w.trace, "add "+id+" "+err.Error())
		return
	}
	w.pending[id] = sess
	w.turns[sess] = prompt
}

func (w *workload) step() {
	res := w.e.Step()
	w.trace = append(w.trace, fmt.Sprintf("step %v prefill=%d decode=%d preempted=%v", res.Duration, res.PrefillTokens, res.DecodeRequests, res.Preempted))
	w.apply(res.Events)
	for _, o := range res.Outputs {
		w.outputs[o.RequestID] = append(w.outputs[o.RequestID], o.Token)
		w.trace = append(w.trace, fmt.Sprintf("out %s %v first=%v cached=%d finish=%s", o.RequestID, o.Token, o.First, o.CachedTokens, o.Finish))
		if (o.Finish != FinishNone) != (o.Usage != nil) {
			w.t.Fatalf("%s: finish %q with usage %v", o.RequestID, o.Finish, o.Usage)
		}
		if o.Usage != nil {
			w.trace = append(w.trace, fmt.Sprintf("usage %+v", *o.Usage))
		}
		if o.Finish != FinishNone {
			sess := w.pending[o.RequestID]
			delete(w.pending, o.RequestID)
			w.turns[sess] = append(w.turns[sess], w.outputs[o.RequestID]...)
			if o.Usage.CompletionTokens != len(w.outputs[o.RequestID]) {
				w.t.Fatalf("%s: usage says %d tokens, got %d", o.RequestID, o.Usage.CompletionTokens, len(w.outputs[o.RequestID]))
			}
		}
	}
}

func (w *workload) op() {
	switch n := w.rng.IntN(100); {
	case n < 25:
		w.add()
	case n < 28 && len(w.pending) > 0:
		for id := range w.pending { // map order is random: pick the smallest for determinism
			min := id
			for id2 := range w.pending {
				if id2 < min {
					min = id2
				}
			}
			w.e.Abort(min)
			delete(w.pending, min)
			w.trace = append(w.trace, "abort "+min)
			break
		}
	case n < 34:
		h := Hint{Kind: []hints.Kind{hints.KindDemote, hints.KindPrefetch, hints.KindShare, hints.KindRelease}[w.rng.IntN(4)], SessionID: fmt.Sprintf("s%d", w.rng.IntN(6)), MaxBlocks: w.rng.IntN(4)}
		if w.rng.IntN(2) == 0 {
			h.Blocks = w.e.Config().hasherFor(w.turns[h.SessionID])
		}
		o := w.e.ApplyHint(h)
		w.trace = append(w.trace, fmt.Sprintf("hint %v %v %d %s", h.Kind, o.Status, o.Blocks, o.Reason))
		w.apply(o.Events)
	case n < 35:
		if evs, err := w.e.Reset(); err == nil {
			w.apply(evs)
			w.trace = append(w.trace, "reset")
		}
	default:
		w.step()
	}
	w.check()
}

func TestRandomWorkloadsKeepInvariants(t *testing.T) {
	configs := map[string]Config{
		"device only":  {BlockSize: 4, NumGPUBlocks: 48, MaxNumSeqs: 4, MaxNumBatchedTokens: 64},
		"host tier":    {BlockSize: 4, NumGPUBlocks: 40, MaxNumSeqs: 3, MaxNumBatchedTokens: 32, HostBlocks: 24},
		"host+disk":    {BlockSize: 4, NumGPUBlocks: 40, MaxNumSeqs: 8, MaxNumBatchedTokens: 48, HostBlocks: 16, DiskBlocks: 24},
		"disk only":    {BlockSize: 2, NumGPUBlocks: 64, MaxNumSeqs: 5, MaxNumBatchedTokens: 16, DiskBlocks: 16},
		"roomy":        {BlockSize: 8, NumGPUBlocks: 512, MaxNumSeqs: 16, MaxNumBatchedTokens: 256, HostBlocks: 64},
		"tiny batches": {BlockSize: 4, NumGPUBlocks: 32, MaxNumSeqs: 2, MaxNumBatchedTokens: 5},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			seeds := uint64(8)
			if raceEnabled {
				seeds = 2
			}
			for seed := range seeds {
				w := newWorkload(t, cfg, seed, true)
				for range 1500 {
					w.op()
				}
				// Drain: everything finishes, nothing leaks.
				for i := 0; w.e.HasWork(); i++ {
					if i > 100000 {
						t.Fatal("engine does not drain")
					}
					w.step()
					w.check()
				}
				st := w.e.Stats()
				if seed == 0 {
					t.Logf("stats: %+v", st)
				}
				if st.Tiers[kv.TierDevice].Used != 0 {
					t.Fatalf("idle engine holds %d blocks", st.Tiers[kv.TierDevice].Used)
				}
				// A subscriber that resyncs from a snapshot sees the same cache.
				snap := newTierIndex()
				if err := snap.apply(w.e.Snapshot()); err != nil {
					t.Fatal(err)
				}
				if err := snap.diff(w.e.contents()); err != nil {
					t.Fatalf("snapshot != cache: %v", err)
				}
			}
		})
	}
}

func TestSameSeedSameRun(t *testing.T) {
	cfg := Config{BlockSize: 4, NumGPUBlocks: 40, MaxNumSeqs: 4, MaxNumBatchedTokens: 32, HostBlocks: 16, Seed: 42}
	run := func() []string {
		w := newWorkload(t, cfg, 99, false)
		for range 2000 {
			w.op()
		}
		return w.trace
	}
	a, b := run(), run()
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two runs with the same seed differ (-first +second):\n%s", diff)
	}
	cfg.Seed = 43
	w := newWorkload(t, cfg, 99, false)
	for range 2000 {
		w.op()
	}
	if cmp.Equal(a, w.trace) {
		t.Fatal("a different engine seed produced the very same run")
	}
}
