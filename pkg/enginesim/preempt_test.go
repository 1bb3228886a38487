package enginesim

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestPreemptionUnderPressureGolden runs three requests that together need
// more blocks than the cache has and records every step. The first lines are
// derived by hand in the comments; the rest is pinned by the golden file.
func TestPreemptionUnderPressureGolden(t *testing.T) {
	// 10 blocks of 4 tokens. a, b, c: 8-token prompts (2 blocks each),
	// 20 output tokens each (7 blocks each at the end): they cannot all fit.
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 10, MaxNumBatchedTokens: 64})
	for i, id := range []string{"a", "b", "c"} {
		if err := e.Add(Request{ID: id, Prompt: seq(100*i, 8), MaxTokens: 20, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	var firstPreemption = -1
	for step := 1; e.HasWork(); step++ {
		res := e.Step()
		st := e.Stats()
		var outs []string
		for _, o := range res.Outputs {
			s := o.RequestID
			if o.Finish != FinishNone {
				s += "!" + o.Finish.String()
			}
			outs = append(outs, s)
		}
		var stored, removed int
		for _, ev := range res.Events {
			switch ev.Kind {
			case kv.Stored:
				stored += len(ev.Blocks)
			case kv.Removed:
				removed += len(ev.Blocks)
			}
		}
		fmt.Fprintf(&b, "step %2d %-9v prefill=%-2d decode=%d out=%v preempted=%v used=%d stored=%d removed=%d\n",
			step, res.Duration.Round(1000), res.PrefillTokens, res.DecodeRequests, outs, res.Preempted,
			st.Tiers[kv.TierDevice].Used, stored, removed)
		if len(res.Preempted) > 0 && firstPreemption < 0 {
			firstPreemption = step
			// Steps 1-5 fill 3 blocks each (12 tokens); step 6 computes
			// token 13, which needs a 4th block: a takes the last free
			// block, b finds none and the newest request, c, is preempted.
			if step != 6 || len(res.Preempted) != 1 || res.Preempted[0] != "c" {
				t.Errorf("first preemption at step %d of %v, want step 6 of [c]", step, res.Preempted)
			}
		}
		if err := e.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	st := e.Stats()
	fmt.Fprintf(&b, "preemptions=%d re-prefilled=%d prompt-computed=%d generated=%d\n",
		st.Preemptions, st.RePrefilledTokens, st.PromptTokens, st.GeneratedTokens)
	if st.GeneratedTokens != 60 || st.Finished != 3 {
		t.Errorf("generated %d tokens over %d requests, want 60 over 3", st.GeneratedTokens, st.Finished)
	}
	if st.Preemptions == 0 || st.RePrefilledTokens == 0 {
		t.Errorf("no preemption recorded: %+v", st)
	}

	path := filepath.Join("testdata", "preemption.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Fatalf("preemption trace changed (-want +got):\n%s", diff)
	}
}

// RePrefilledTokens counts only the tokens a preemption made the engine
// compute again: what the victim had computed, less what its re-admission
// found still cached.
func TestRePrefilledCountsOnlyRecomputation(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 12})
	must(t, e.Add(Request{ID: "a", Prompt: seq(0, 16), MaxTokens: 24, IgnoreEOS: true}))
	must(t, e.Add(Request{ID: "b", Prompt: seq(100, 16), MaxTokens: 24, IgnoreEOS: true}))
	var lost, rehit int64
	preempted := false
	for e.HasWork() {
		slot, ok := e.byID["b"]
		waiting := ok && e.reqs[slot].state == stateWaiting
		hits := e.Stats().PrefixHitTokens
		res := e.Step()
		if preempted && waiting && ok && e.reqs[slot].state == stateRunning {
			rehit += e.Stats().PrefixHitTokens - hits // b's re-admission
		}
		for _, id := range res.Preempted {
			if id != "b" || preempted {
				t.Fatalf("unexpected preemption of %s (the scenario preempts b once)", id)
			}
			preempted = true
			lost = int64(e.reqs[e.byID["b"]].recompute)
		}
	}
	st := e.Stats()
	if !preempted || lost == 0 || rehit == 0 {
		t.Fatalf("scenario: preempted %v, lost %d, re-hit %d", preempted, lost, rehit)
	}
	t.Logf("lost %d, re-hit %d, re-prefilled %d", lost, rehit, st.RePrefilledTokens)
	if want := lost - rehit; st.RePrefilledTokens != want {
		t.Fatalf("re-prefilled %d, want %d lost − %d found cached = %d", st.RePrefilledTokens, lost, rehit, want)
	}
}
