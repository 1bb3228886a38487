package routing

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newRouter(t testing.TB, mod func(*Config)) *Router {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(&cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func cands(names ...string) []Candidate {
	out := make([]Candidate, len(names))
	for i, n := range names {
		out[i] = Candidate{Worker: n}
	}
	return out
}

func TestRouteNoWorkers(t *testing.T) {
	r := newRouter(t, nil)
	if _, err := r.Route(t0, Request{ID: "a", ISLTokens: 16}, nil, ""); !errors.Is(err, ErrNoWorkers) {
		t.Fatalf("err = %v, want ErrNoWorkers", err)
	}
}

func TestKVPicksLargestOverlap(t *testing.T) {
	r := newRouter(t, nil)
	c := cands("a", "b", "c")
	c[1].Overlap = Overlap{Device: 5}
	c[2].Overlap = Overlap{HostExt: 5} // 3.75 credit < 5
	d, err := r.Route(t0, Request{ID: "1", ISLTokens: 160}, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker != "b" || d.Reason != ReasonCost {
		t.Fatalf("chose %s (%s), want b by cost; scores %+v", d.Worker, d.Reason, d.Scores)
	}
	if got := d.ChosenScore().Cost; got != 15 {
		t.Fatalf("cost %v, want 15", got)
	}
}

func TestTieBreakIsRandomAmongTiesOnly(t *testing.T) {
	r := newRouter(t, nil)
	c := cands("a", "b", "c", "d")
	c[3].Reported.ActiveBlocks = 1 // strictly worse: never chosen
	seen := map[string]int{}
	for i := range 400 {
		d, err := r.Route(t0, Request{ID: fmt.Sprint(i), ISLTokens: 32}, c, "")
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Worker]++
		r.Finish(t0, fmt.Sprint(i), 0) // keep loads equal
	}
	if seen["d"] != 0 {
		t.Errorf("worse worker chosen %d times", seen["d"])
	}
	for _, w := range []string{"a", "b", "c"} {
		if seen[w] < 80 { // expected 133 each; a fixed seed keeps this deterministic
			t.Errorf("tied worker %s chosen %d/400 times: %v", w, seen[w], seen)
		}
	}
}

func TestSoftmaxTemperature(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Temperature = 0.5 })
	c := cands("cheap", "dear")
	c[0].Overlap = Overlap{Device: 10}
	seen := map[string]int{}
	for i := range 1000 {
		d, _ := r.Route(t0, Request{ID: "x", ISLTokens: 160}, c, "")
		seen[d.Worker]++
		r.Finish(t0, "x", 0)
		_ = i
	}
	// Normalised costs 0 and 1 at T=0.5: p(dear) = e^-2/(1+e^-2) ≈ 0.12.
	if seen["dear"] < 60 || seen["dear"] > 200 || seen["cheap"] <= seen["dear"] {
		t.Fatalf("softmax split %v, want ~880/120", seen)
	}
	// All-equal costs sample uniformly rather than dividing by zero.
	eq := cands("a", "b")
	for range 10 {
		if _, err := r.Route(t0, Request{ID: "y", ISLTokens: 16}, eq, ""); err != nil {
			t.Fatal(err)
		}
		r.Finish(t0, "y", 0)
	}
}

func TestTrackedLoadSpreadsABurst(t *testing.T) {
	// Without tracking, a burst of identical cold requests would all land on
	// whichever worker wins the first tie; with it they spread evenly.
	r := newRouter(t, nil)
	c := cands("a", "b", "c", "d")
	per := map[string]int{}
	for i := range 8 {
		d, _ := r.Route(t0, Request{ID: fmt.Sprint(i), ISLTokens: 1600}, c, "")
		per[d.Worker]++
	}
	for _, w := range []string{"a", "b", "c", "d"} {
		if per[w] != 2 {
			t.Fatalf("burst split %v, want 2 each", per)
		}
	}
	tr := r.Load().Worker("a")
	if tr.Requests != 2 || tr.PrefillTokens != 3200 || tr.DecodeBlocks != 200 {
		t.Fatalf("tracked %+v", tr)
	}
}

func TestLoadLifecycle(t *testing.T) {
	r := newRouter(t, nil)
	c := cands("a")
	c[0].Overlap = Overlap{Device: 2}
	if _, err := r.Route(t0, Request{ID: "r1", ISLTokens: 100}, c, ""); err != nil {
		t.Fatal(err)
	}
	// Prefill counts only the uncached tokens: 100 − 2·16.
	if got := r.Load().Worker("a"); got != (Tracked{PrefillTokens: 68, DecodeBlocks: 7, Requests: 1}) {
		t.Fatalf("after add: %+v", got)
	}
	r.MarkPrefillDone("r1")
	r.MarkPrefillDone("r1") // idempotent
	if got := r.Load().Worker("a"); got != (Tracked{DecodeBlocks: 7, Requests: 1}) {
		t.Fatalf("after prefill: %+v", got)
	}
	if w, _, ok := r.Finish(t0, "r1", 0); !ok || w != "a" {
		t.Fatalf("finish = %s %v", w, ok)
	}
	// Freed, and remembered as freed until a's next report.
	if got := r.Load().Worker("a"); got != (Tracked{FreedBlocks: 7, FreedRequests: 1}) {
		t.Fatalf("after free: %+v", got)
	}
	r.Reported("a")
	if got := r.Load().Worker("a"); got != (Tracked{}) {
		t.Fatalf("after the report: %+v", got)
	}
	if _, _, ok := r.Finish(t0, "r1", 0); ok {
		t.Fatal("double free reported ok")
	}
}

// A report sampled before some finishes (a heartbeat on its way, a real
// engine's metrics scraped earlier) still counts them running: they stay
// taken out of it, and only those freed before its sample are forgotten.
func TestReportSampledBeforeAFinishStillHasItTakenOut(t *testing.T) {
	r := newRouter(t, nil)
	c := cands("a")
	for i, id := range []string{"r1", "r2", "r3"} {
		if _, err := r.Route(t0, Request{ID: id, ISLTokens: 100 * (i + 1)}, c, ""); err != nil {
			t.Fatal(err)
		}
	}
	r.Finish(t0.Add(1*time.Second), "r1", 0) // 7 blocks
	r.Finish(t0.Add(2*time.Second), "r2", 0) // 13 blocks
	r.ReportedAt("a", t0.Add(1500*time.Millisecond))
	if got := r.Load().Worker("a"); got.FreedBlocks != 13 || got.FreedRequests != 1 {
		t.Fatalf("a report sampled before r2's finish: %+v, want r2 (13 blocks) still taken out", got)
	}
	r.Finish(t0.Add(3*time.Second), "r3", 0) // 19 blocks
	r.ReportedAt("a", t0.Add(2*time.Second)) // at r2's finish: it counts it finished
	if got := r.Load().Worker("a"); got.FreedBlocks != 19 || got.FreedRequests != 1 {
		t.Fatalf("a report sampled at r2's finish: %+v, want r3 alone taken out", got)
	}
	r.Reported("a")
	if got := r.Load().Worker("a"); got != (Tracked{}) {
		t.Fatalf("after a report that counts every finish: %+v", got)
	}
	// Finishes recorded out of their order (concurrent calls read the
	// clock before the lock) are each judged by their own time.
	for i, id := range []string{"r4", "r5", "r6"} {
		if _, err := r.Route(t0, Request{ID: id, ISLTokens: 100 * (i + 1)}, c, ""); err != nil {
			t.Fatal(err)
		}
	}
	r.Finish(t0.Add(5*time.Second), "r4", 0) // 7 blocks
	r.Finish(t0.Add(4*time.Second), "r5", 0) // 13 blocks
	r.ReportedAt("a", t0.Add(4500*time.Millisecond))
	if got := r.Load().Worker("a"); got.FreedBlocks != 7 || got.FreedRequests != 1 {
		t.Fatalf("finishes out of order: %+v, want r4 alone still taken out", got)
	}
}

func TestReportedLoadCountsWhenHigher(t *testing.T) {
	r := newRouter(t, nil)
	c := cands("a", "b")
	c[0].Reported = Load{ActiveBlocks: 50, RunningRequests: 3}
	d, _ := r.Route(t0, Request{ID: "1", ISLTokens: 16}, c, "")
	if d.Worker != "b" || d.Scores[0].DecodeBlocks != 51 || d.Scores[0].ActiveRequests != 3 {
		t.Fatalf("decision %+v", d)
	}
}

// A session's next turn, sent as soon as the last one finished, finds its
// worker's latest report still counting the last turn: the blocks it held
// are the prefix the next turn reuses, so charging them again cancels the
// cache credit, and the turn went to a cold worker (compose smoke test).
// Finishes since the report come out of it, until the worker reports again,
// with the blocks they generated into as well as their prompts': a report
// taken as turn 1 decoded counted those too, and charging the one block left
// over exactly cancelled the README demo's one-block credit, so its second
// turn moved to a cold worker at random.
func TestReportBeforeFinishDoesNotCountIt(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		prompt, generated, nextPrompt int // tokens
		reported                      int // a's blocks at its report during turn 1
	}{
		{name: "long prompt", prompt: 44 * 16, generated: 16, nextPrompt: 46 * 16, reported: 45},
		{name: "README demo", prompt: 18, generated: 32, nextPrompt: 18, reported: 3},
	} {
		for seed := range uint64(20) {
			r, err := New(nil, rand.New(rand.NewPCG(seed, 2)))
			if err != nil {
				t.Fatal(err)
			}
			c := cands("a", "b", "c", "d")
			if d, _ := r.Route(t0, Request{ID: "turn1", ISLTokens: tc.prompt}, c[:1], ""); d.Worker != "a" {
				t.Fatalf("turn 1 on %s", d.Worker)
			}
			c[0].Reported = Load{ActiveBlocks: tc.reported, RunningRequests: 1}
			r.Finish(t0, "turn1", tc.generated)
			c[0].Overlap = Overlap{Device: tc.prompt / 16}
			d, _ := r.Route(t0, Request{ID: "turn2", ISLTokens: tc.nextPrompt}, c, "")
			if d.Worker != "a" {
				t.Fatalf("%s, seed %d: turn 2 went to %s; scores %+v", tc.name, seed, d.Worker, d.Scores)
			}
			want := float64(requestBlocks(tc.nextPrompt, 16)) // its own prompt, nothing of turn 1
			if got := d.ChosenScore(); got.DecodeBlocks != want || got.ActiveRequests != 0 {
				t.Fatalf("%s, seed %d: a charged %v blocks, %d requests; want %v, 0", tc.name, seed, got.DecodeBlocks, got.ActiveRequests, want)
			}
			r.Finish(t0, "turn2", 0)
			// A fresh report is taken at its word.
			r.Reported("a")
			c[0].Reported = Load{ActiveBlocks: 45, RunningRequests: 1}
			if d, _ := r.Route(t0, Request{ID: "turn3", ISLTokens: 16}, c[:1], ""); d.ChosenScore().DecodeBlocks != 46 || d.ChosenScore().ActiveRequests != 1 {
				t.Fatalf("%s, seed %d: after a new report: %+v", tc.name, seed, d.ChosenScore())
			}
		}
	}
}

func TestStaleRequestsAreSwept(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyKVAffinity })
	r.Route(t0, Request{ID: "lost", SessionID: "s", ISLTokens: 16}, cands("a"), "")
	if _, stale := r.Expire(t0.Add(4 * time.Minute)); len(stale) != 0 {
		t.Fatalf("swept early: %v", stale)
	}
	_, stale := r.Expire(t0.Add(5 * time.Minute))
	if len(stale) != 1 || r.Load().Len() != 0 {
		t.Fatalf("stale %v, in flight %d", stale, r.Load().Len())
	}
}

// A request its worker reports still running keeps its load past the stale
// age, counted from the last report; one only another worker names (an
// attempt a migration left open there) is swept, and so is the long one
// once the reports stop (its frontend went away).
func TestRunningRequestsAreKept(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyKVAffinity })
	r.Route(t0, Request{ID: "long", SessionID: "s", ISLTokens: 16}, cands("a"), "")
	r.Route(t0, Request{ID: "lost", SessionID: "u", ISLTokens: 16}, cands("a"), "")
	r.Running(t0.Add(4*time.Minute), "a", []string{"long", "another-replicas"})
	r.Running(t0.Add(4*time.Minute), "b", []string{"lost"}) // not where it was routed
	_, stale := r.Expire(t0.Add(5 * time.Minute))
	if len(stale) != 1 || stale[0].ID != "lost" || r.Load().Len() != 1 {
		t.Fatalf("at 5m: stale %v, in flight %d; want lost swept, long kept", stale, r.Load().Len())
	}
	r.Running(t0.Add(3*time.Minute), "a", []string{"long"}) // an older report moves nothing back
	if _, stale := r.Expire(t0.Add(8*time.Minute + time.Second)); len(stale) != 0 {
		t.Fatalf("swept before 5m after its last report: %v", stale)
	}
	if _, stale := r.Expire(t0.Add(9 * time.Minute)); len(stale) != 1 || stale[0].ID != "long" || r.Load().Len() != 0 {
		t.Fatalf("at 9m: stale %v, in flight %d; want long swept", stale, r.Load().Len())
	}
}

func TestRoundRobin(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyRoundRobin })
	c := cands("a", "b", "c")
	c[2].Overlap = Overlap{Device: 100} // ignored
	var got string
	for i := range 6 {
		d, _ := r.Route(t0, Request{ID: fmt.Sprint(i), ISLTokens: 16}, c, "")
		got += d.Worker
	}
	if got != "abcabc" {
		t.Fatalf("order %s", got)
	}
}

func TestLeastLoadedIgnoresOverlap(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyLeastLoaded })
	c := cands("a", "b")
	c[0].Overlap = Overlap{Device: 100}
	c[0].Reported.ActiveBlocks = 3
	d, _ := r.Route(t0, Request{ID: "1", ISLTokens: 16}, c, "")
	if d.Worker != "b" || d.Reason != ReasonLeastLoaded {
		t.Fatalf("chose %s %s", d.Worker, d.Reason)
	}
}

func TestPinWins(t *testing.T) {
	r := newRouter(t, nil)
	c := cands("a", "b")
	c[0].Overlap = Overlap{Device: 10}
	d, _ := r.Route(t0, Request{ID: "1", ISLTokens: 160}, c, "b")
	if d.Worker != "b" || d.Reason != ReasonPinned {
		t.Fatalf("chose %s %s", d.Worker, d.Reason)
	}
	// A pin to a worker that is not a candidate falls back to the cost.
	d, _ = r.Route(t0, Request{ID: "2", ISLTokens: 160}, c, "gone")
	if d.Worker != "a" || d.Reason != ReasonCost {
		t.Fatalf("chose %s %s", d.Worker, d.Reason)
	}
}

func TestHardAffinity(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyKVAffinity; c.AffinityTTL = time.Minute })
	c := cands("a", "b")
	c[0].Overlap = Overlap{Device: 10}
	d, _ := r.Route(t0, Request{ID: "1", SessionID: "s", ISLTokens: 160}, c, "")
	if d.Worker != "a" {
		t.Fatalf("first turn on %s", d.Worker)
	}
	r.Finish(t0, "1", 0)
	// Now b looks far better, but the session is bound to a.
	c[0].Overlap, c[1].Overlap = Overlap{}, Overlap{Device: 10}
	d, _ = r.Route(t0.Add(59*time.Second), Request{ID: "2", SessionID: "s", ISLTokens: 160}, c, "")
	if d.Worker != "a" || d.Reason != ReasonAffinity {
		t.Fatalf("second turn on %s (%s)", d.Worker, d.Reason)
	}
	// A lease keeps the binding past the TTL while the request runs.
	d, _ = r.Route(t0.Add(5*time.Minute), Request{ID: "3", SessionID: "s", ISLTokens: 160}, c, "")
	if d.Worker != "a" {
		t.Fatalf("leased binding lost: %s", d.Worker)
	}
	r.Finish(t0.Add(5*time.Minute), "2", 0)
	r.Finish(t0.Add(5*time.Minute), "3", 0)
	// Idle for the TTL: the binding expires and the cost decides again.
	d, _ = r.Route(t0.Add(6*time.Minute), Request{ID: "4", SessionID: "s", ISLTokens: 160}, c, "")
	if d.Worker != "b" || d.Reason != ReasonCost {
		t.Fatalf("after TTL on %s (%s)", d.Worker, d.Reason)
	}
}

func TestAffinityIdleExpiryAndWorkerLoss(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyKVAffinity; c.AffinityTTL = time.Minute })
	r.Route(t0, Request{ID: "1", SessionID: "s", ISLTokens: 16}, cands("a"), "")
	r.Finish(t0, "1", 0)
	if n := r.Affinity().Expire(t0.Add(59 * time.Second)); n != 0 {
		t.Fatalf("expired early: %d", n)
	}
	if n := r.Affinity().Expire(t0.Add(time.Minute)); n != 1 {
		t.Fatalf("expired %d, want 1", n)
	}
	r.Route(t0, Request{ID: "2", SessionID: "s", ISLTokens: 16}, cands("a"), "")
	r.RemoveWorker("a")
	if r.Affinity().Len() != 0 || r.Load().Worker("a") != (Tracked{}) {
		t.Fatalf("worker removal left %d bindings, load %+v", r.Affinity().Len(), r.Load().Worker("a"))
	}
	// The request in flight there still finishes (its turn must end), and
	// charges nothing to the worker if it comes back first, nor frees the
	// lease of the session's binding made since.
	r.Route(t0, Request{ID: "5", SessionID: "s", ISLTokens: 160}, cands("a"), "")
	if w, _, ok := r.Finish(t0, "2", 0); !ok || w != "a" || r.Load().Worker("a").Requests != 1 || r.Load().Len() != 1 {
		t.Fatalf("the orphaned request's finish: %q %v, load %+v", w, ok, r.Load().Worker("a"))
	}
	if n := r.Affinity().Expire(t0.Add(time.Hour)); n != 0 {
		t.Fatalf("the orphan's finish freed the new binding's lease: %d expired mid-request", n)
	}
	r.Finish(t0, "5", 0)
	// A bound worker that is no longer a candidate voids the binding.
	r.Route(t0, Request{ID: "3", SessionID: "t", ISLTokens: 16}, cands("a"), "")
	d, _ := r.Route(t0, Request{ID: "4", SessionID: "t", ISLTokens: 16}, cands("b"), "")
	if d.Worker != "b" {
		t.Fatalf("chose %s", d.Worker)
	}
}

func TestAffinityOffWithoutTTLOrForKV(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Policy = PolicyKV },
		func(c *Config) { c.Policy = PolicyKVAffinity; c.AffinityTTL = 0 },
	} {
		r := newRouter(t, mod)
		c := cands("a", "b")
		c[0].Overlap = Overlap{Device: 10}
		r.Route(t0, Request{ID: "1", SessionID: "s", ISLTokens: 160}, c, "")
		c[0].Overlap, c[1].Overlap = Overlap{}, Overlap{Device: 10}
		d, _ := r.Route(t0, Request{ID: "2", SessionID: "s", ISLTokens: 160}, c, "")
		if d.Worker != "b" {
			t.Fatalf("%+v: chose %s, want the cost to decide", r.Config().Policy, d.Worker)
		}
	}
}

func TestSoftAffinity(t *testing.T) {
	r := newRouter(t, func(c *Config) {
		c.Policy = PolicyKVAffinity
		c.AffinityMode = AffinitySoft
		c.SoftAffinityMarginBlocks = 3
	})
	c := cands("a", "b")
	c[0].Overlap = Overlap{Device: 10}
	r.Route(t0, Request{ID: "1", SessionID: "s", ISLTokens: 160}, c, "")
	r.Finish(t0, "1", 0)
	// b is cheaper by 2 blocks (< margin 3): stay on a.
	c[0].Overlap, c[1].Overlap = Overlap{Device: 3}, Overlap{Device: 5}
	d, _ := r.Route(t0, Request{ID: "2", SessionID: "s", ISLTokens: 160}, c, "")
	if d.Worker != "a" || d.Reason != ReasonAffinity {
		t.Fatalf("chose %s %s", d.Worker, d.Reason)
	}
	r.Finish(t0, "2", 0)
	// b is cheaper by 5: move, and the binding follows.
	c[0].Overlap, c[1].Overlap = Overlap{}, Overlap{Device: 5}
	d, _ = r.Route(t0, Request{ID: "3", SessionID: "s", ISLTokens: 160}, c, "")
	if d.Worker != "b" || d.Reason != ReasonCost {
		t.Fatalf("chose %s %s", d.Worker, d.Reason)
	}
	if w, _ := r.Affinity().Lookup(t0, "s"); w != "b" {
		t.Fatalf("binding on %s, want b", w)
	}
}

func TestSubagentPlacement(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyKVAffinity })
	c := cands("a", "b")
	c[0].Reported.CapacityTokens, c[1].Reported.CapacityTokens = 16000, 16000
	c[1].Overlap = Overlap{Device: 10} // parent lands on b
	r.Route(t0, Request{ID: "p", SessionID: "parent", ISLTokens: 160}, c, "")
	// The child shares nothing with the parent in the index, yet goes to b.
	c[1].Overlap = Overlap{}
	c[0].Overlap = Overlap{Device: 2}
	d, _ := r.Route(t0, Request{ID: "c1", SessionID: "child", ParentSessionID: "parent", ISLTokens: 160}, c, "")
	if d.Worker != "b" || d.Reason != ReasonSubagent {
		t.Fatalf("child on %s (%s)", d.Worker, d.Reason)
	}
	// b is now nearly full (reported 850 blocks·16 = 13,600 of 16,000 tokens): no room.
	c[1].Reported.ActiveBlocks = 850
	d, _ = r.Route(t0, Request{ID: "c2", SessionID: "child2", ParentSessionID: "parent", ISLTokens: 160}, c, "")
	if d.Worker != "a" || d.Reason != ReasonCost {
		t.Fatalf("child2 on %s (%s)", d.Worker, d.Reason)
	}
	// No free request slot: no room either.
	c[1].Reported = Load{CapacityTokens: 16000, MaxRunning: 2}
	d, _ = r.Route(t0, Request{ID: "c3", SessionID: "child3", ParentSessionID: "parent", ISLTokens: 160}, c, "")
	if d.Worker != "a" {
		t.Fatalf("child3 on %s (%s)", d.Worker, d.Reason)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range Policies {
		if got, err := ParsePolicy(string(p)); err != nil || got != p {
			t.Fatalf("%s: %v %v", p, got, err)
		}
	}
	if _, err := ParsePolicy("nope"); err == nil {
		t.Fatal("want error")
	}
}

func TestPerRequestPolicyOverride(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyKV })
	c := cands("a", "b", "c")
	c[2].Overlap = Overlap{Device: 10}
	var got string
	for i := range 3 {
		d, _ := r.Route(t0, Request{ID: fmt.Sprint(i), ISLTokens: 160, Policy: PolicyRoundRobin}, c, "")
		got += d.Worker
		r.Finish(t0, fmt.Sprint(i), 0)
	}
	if got != "abc" {
		t.Fatalf("round robin override chose %s", got)
	}
	d, _ := r.Route(t0, Request{ID: "kv", ISLTokens: 160}, c, "")
	if d.Worker != "c" {
		t.Fatalf("default policy chose %s", d.Worker)
	}
}

// An inherited session (another replica routed it before) is held to the
// worker with its longest device prefix even where the cost prefers
// another, as its binding would have held it; a session that is not
// inherited goes by the cost.
func TestInheritedSessionKeepsItsCachedWorker(t *testing.T) {
	r := newRouter(t, func(c *Config) { c.Policy = PolicyKVAffinity; c.AffinityTTL = time.Minute })
	c := cands("a", "b", "c")
	c[1].Overlap = Overlap{Device: 4}
	// a is idle, b holds 4 blocks of 10 but is busy: the cost prefers a.
	for i := range 6 {
		r.Route(t0, Request{ID: fmt.Sprint("busy-", i), ISLTokens: 1600}, []Candidate{{Worker: "b"}}, "")
	}
	d, _ := r.Route(t0, Request{ID: "fresh", SessionID: "s1", ISLTokens: 160}, c, "")
	if d.Worker == "b" {
		t.Fatalf("a session not inherited went to the busy cached worker (%s)", d.Reason)
	}
	d, _ = r.Route(t0, Request{ID: "inherited", SessionID: "s2", ISLTokens: 160, Inherited: true}, c, "")
	if d.Worker != "b" || d.Reason != ReasonInherited {
		t.Fatalf("inherited session on %s (%s), want b (inherited)", d.Worker, d.Reason)
	}
	// Bound now: its next turn stays by affinity.
	d, _ = r.Route(t0, Request{ID: "next", SessionID: "s2", ISLTokens: 160, Inherited: true}, c, "")
	if d.Worker != "b" || d.Reason != ReasonAffinity {
		t.Fatalf("next turn on %s (%s)", d.Worker, d.Reason)
	}
	// Nothing cached anywhere: no opinion, the cost decides.
	d, _ = r.Route(t0, Request{ID: "cold", SessionID: "s3", ISLTokens: 160, Inherited: true}, cands("a", "c"), "")
	if d.Reason != ReasonCost {
		t.Fatalf("inherited with nothing cached: %s", d.Reason)
	}
}
