package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"switchyard.dev/pkg/hints"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/trace"
)

// growing builds a session whose turn i has 4+4i trace blocks of 64 tokens
// (plus a partial tail), each turn extending the one before.
func growing(id string, ns uint64, turns int, gap time.Duration) *trace.Session {
	s := &trace.Session{ID: id, Parent: -1}
	var blocks []uint64
	for i := range turns {
		for len(blocks) < 4+4*i {
			blocks = append(blocks, ns<<32|uint64(len(blocks)+1))
		}
		s.Turns = append(s.Turns, trace.Turn{Blocks: append([]uint64(nil), blocks...), InputLen: len(blocks)*64 + 10,
			OutputLen: 20, Gap: gap, ToolCall: i < turns-1})
	}
	s.Turns[0].Gap = 0
	return s
}

func smallConfig(p routing.Policy, workers, conc int) Config {
	c := DefaultConfig()
	c.Workers, c.Concurrency, c.Policy = workers, conc, p
	c.Engine.BlockSize = 16
	c.Engine.NumGPUBlocks = 4096
	return c
}

func TestSingleSessionHitsCacheAfterFirstTurn(t *testing.T) {
	w := &trace.Workload{Name: "one", BlockSize: 64, Sessions: []*trace.Session{growing("s", 1, 6, 2*time.Second)}}
	var got []TurnResult
	c := smallConfig(routing.PolicyKV, 1, 1)
	c.OnTurn = func(tr TurnResult) { got = append(got, tr) }
	res, err := Run(w, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || res.Turns != 6 {
		t.Fatalf("%d turns", len(got))
	}
	for i, tr := range got {
		want := 0
		if i > 0 {
			want = len(w.Sessions[0].Turns[i-1].Blocks) * 64 // every full block of the previous prompt
		}
		if tr.CachedTokens != want {
			t.Errorf("turn %d: cached %d, want %d", i, tr.CachedTokens, want)
		}
		if i > 0 && tr.Sent < got[i-1].Done+2*time.Second {
			t.Errorf("turn %d sent at %v before the previous turn's end %v + gap", i, tr.Sent, got[i-1].Done)
		}
		if tr.FirstToken <= tr.Sent || tr.Done <= tr.FirstToken {
			t.Errorf("turn %d timings %v %v %v", i, tr.Sent, tr.FirstToken, tr.Done)
		}
	}
	if res.ReprefillTokens != 0 || res.Preemptions != 0 {
		t.Errorf("reprefill %d preemptions %d", res.ReprefillTokens, res.Preemptions)
	}
	if res.PrefixHitRate <= 0.5 || res.PrefixHitRate > res.IdealHitRate+1e-9 {
		t.Errorf("hit rate %v (ideal %v)", res.PrefixHitRate, res.IdealHitRate)
	}
}

func TestEngineBlockLargerThanTraceBlock(t *testing.T) {
	// Mooncake-like 16-token trace blocks on 64-token engine blocks.
	s := growing("s", 1, 4, time.Second)
	w := &trace.Workload{Name: "m", BlockSize: 16, Sessions: []*trace.Session{s}}
	for i := range s.Turns {
		s.Turns[i].InputLen = len(s.Turns[i].Blocks) * 16
	}
	var got []TurnResult
	c := smallConfig(routing.PolicyKV, 1, 1)
	c.Engine.BlockSize = 64
	c.OnTurn = func(tr TurnResult) { got = append(got, tr) }
	if _, err := Run(w, c); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(got); i++ {
		if want := len(s.Turns[i-1].Blocks) * 16; got[i].CachedTokens != want {
			t.Errorf("turn %d cached %d want %d", i, got[i].CachedTokens, want)
		}
	}
}

func randomWorkload(seed uint64, sessions int) *trace.Workload {
	r := rand.New(rand.NewPCG(seed, 1))
	w := &trace.Workload{Name: "rand", BlockSize: 64}
	for i := range sessions {
		s := growing(fmt.Sprintf("s%d", i), uint64(i+1), 2+r.IntN(6), time.Duration(r.IntN(5000))*time.Millisecond)
		w.Sessions = append(w.Sessions, s)
		if i%4 == 0 { // a sub-agent before the last turn
			c := growing(fmt.Sprintf("s%d/agent", i), uint64(1000+i), 3, 500*time.Millisecond)
			c.Parent = i * 0
			idx := len(w.Sessions)
			c.Parent = idx - 1
			w.Sessions = append(w.Sessions, c)
			last := len(s.Turns) - 1
			s.Turns[last].Children = append(s.Turns[last].Children, idx)
		}
	}
	return w
}

func TestDeterministic(t *testing.T) {
	w := randomWorkload(7, 24)
	for _, p := range routing.Policies {
		t.Run(string(p), func(t *testing.T) {
			c := smallConfig(p, 3, 6)
			c.Engine.NumGPUBlocks = 300 // pressure: evictions and preemptions
			a, err := Run(w, c)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Run(w, c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(a, b); diff != "" {
				t.Fatalf("same seed, different results:\n%s", diff)
			}
			if a.Turns != w.Stats().Turns {
				t.Errorf("%d of %d turns ran", a.Turns, w.Stats().Turns)
			}
		})
	}
}

func TestSubagentBeforeParentTurn(t *testing.T) {
	w := randomWorkload(3, 4)
	done := map[string]time.Duration{}
	sent := map[string]time.Duration{}
	c := smallConfig(routing.PolicySessionAware, 2, 4)
	c.OnTurn = func(tr TurnResult) {
		done[tr.SessionID] = max(done[tr.SessionID], tr.Done)
		sent[fmt.Sprintf("%s#%d", tr.SessionID, tr.Turn)] = tr.Sent
	}
	if _, err := Run(w, c); err != nil {
		t.Fatal(err)
	}
	for i, s := range w.Sessions {
		for j, tt := range s.Turns {
			for _, ch := range tt.Children {
				cs := w.Sessions[ch]
				if got := sent[fmt.Sprintf("%s#%d", s.ID, j)]; got < done[cs.ID] {
					t.Errorf("session %d turn %d sent at %v before its sub-agent ended at %v", i, j, got, done[cs.ID])
				}
			}
		}
	}
}

func TestConcurrencyLimitsActiveSessions(t *testing.T) {
	w := randomWorkload(5, 12)
	active, peak := 0, 0
	first := map[string]bool{}
	last := map[string]int{}
	for _, s := range w.Sessions {
		if s.Parent < 0 {
			last[s.ID] = len(s.Turns) - 1
		}
	}
	c := smallConfig(routing.PolicyRoundRobin, 2, 3)
	// Sessions start and end in turn order; count top-level sessions between
	// their first and last turns' completions (a lower bound of activity).
	c.OnTurn = func(tr TurnResult) {
		l, top := last[tr.SessionID]
		if !top {
			return
		}
		if !first[tr.SessionID] {
			first[tr.SessionID] = true
			active++
			peak = max(peak, active)
		}
		if tr.Turn == l {
			active--
		}
	}
	if _, err := Run(w, c); err != nil {
		t.Fatal(err)
	}
	if peak > 3 || peak == 0 {
		t.Errorf("peak active sessions %d with concurrency 3", peak)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if p := percentile(xs, 0.5); p != 3 {
		t.Errorf("p50 %v", p)
	}
	if p := percentile(xs, 0.99); p != 5 {
		t.Errorf("p99 %v", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("empty %v", p)
	}
}

func TestSteadyOnlyStopsAtWindow(t *testing.T) {
	w := randomWorkload(9, 16)
	c := smallConfig(routing.PolicyKV, 2, 4)
	full, err := Run(w, c)
	if err != nil {
		t.Fatal(err)
	}
	c.SteadyOnly = true
	st, err := Run(w, c)
	if err != nil {
		t.Fatal(err)
	}
	if st.WindowS != full.WindowS || st.MakespanS != st.WindowS || st.Turns >= full.Turns {
		t.Errorf("steady: window %v makespan %v turns %d; full: window %v turns %d", st.WindowS, st.MakespanS, st.Turns, full.WindowS, full.Turns)
	}
}

// With a GPU too small for the sessions' working sets, a shared pool serves
// what the engines evicted, per-tier hits add up to the prefix hit rate, and
// the run stays deterministic.
func TestSharedPoolServesEvictedPrefixes(t *testing.T) {
	var sessions []*trace.Session
	for i := range 6 {
		sessions = append(sessions, growing(fmt.Sprintf("s%d", i), uint64(i+1), 6, 3*time.Second))
	}
	w := &trace.Workload{Name: "pool", BlockSize: 64, Sessions: sessions}
	run := func(pages int) Result {
		c := smallConfig(routing.PolicyKV, 2, 6)
		c.Engine.NumGPUBlocks = 96 // 1,536 tokens: a few turns' prompts
		c.SharedPool = PoolConfig{Pages: pages}
		c.SharedPool.Layout.TPSize = 2
		res, err := Run(w, c)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	without, with := run(0), run(4096)
	if without.SharedHitTokens != 0 || with.SharedHitTokens == 0 || with.PoolWrites == 0 {
		t.Fatalf("shared hits without pool %d, with %d (pool writes %d)", without.SharedHitTokens, with.SharedHitTokens, with.PoolWrites)
	}
	if with.PrefixHitRate <= without.PrefixHitRate || with.EvictedReprefill >= without.EvictedReprefill {
		t.Fatalf("the pool did not help: hit rate %.3f -> %.3f, evicted re-prefill %d -> %d",
			without.PrefixHitRate, with.PrefixHitRate, without.EvictedReprefill, with.EvictedReprefill)
	}
	for _, r := range []Result{without, with} {
		sum, rate := r.DeviceHitTokens+r.HostHitTokens+r.DiskHitTokens+r.SharedHitTokens, 0.0
		for _, x := range r.HitRateByTier {
			rate += x
		}
		if sum != r.CachedTokens || math.Abs(rate-r.PrefixHitRate) > 1e-9 {
			t.Fatalf("per-tier hits %d (rate %.4f) != cached %d (rate %.4f)", sum, rate, r.CachedTokens, r.PrefixHitRate)
		}
	}
	if again := run(4096); !cmp.Equal(again, with) {
		t.Fatalf("same seed, different result:\n%s", cmp.Diff(with, again))
	}
}

// Hints run inside the simulator: the policies see the turns (or admission
// control's program events), decide on the lineage the engines' events
// build, and the engines act on what they send; the run stays deterministic.
func TestHintsRunInTheSimulator(t *testing.T) {
	var sessions []*trace.Session
	for i := range 8 {
		sessions = append(sessions, growing(fmt.Sprintf("s%d", i), uint64(i+1), 6, 20*time.Second))
	}
	w := &trace.Workload{Name: "hints", BlockSize: 64, Sessions: sessions}
	for _, p := range []routing.Policy{routing.PolicyKV, routing.PolicySessionAware} {
		run := func(on bool) Result {
			c := smallConfig(p, 2, 8)
			c.Engine.NumGPUBlocks = 128
			c.Engine.HostBlocks = 256
			if on {
				hc := hints.DefaultConfig()
				hc.Disabled = nil // every policy, demote on long tool calls included
				c.Hints = &hc
			}
			res, err := Run(w, c)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		off, on := run(false), run(true)
		if off.HintsSent != 0 || on.HintsSent == 0 || on.HintBlocksMoved == 0 {
			t.Fatalf("%s: hints sent %d without, %d with (%d blocks moved, %v)", p, off.HintsSent, on.HintsSent, on.HintBlocksMoved, on.HintsByResult)
		}
		if again := run(true); !cmp.Equal(again, on) {
			t.Fatalf("%s: same seed, different result:\n%s", p, cmp.Diff(on, again))
		}
		t.Logf("%s: re-prefill %d -> %d tokens, hit %.3f -> %.3f, hints %v", p, off.ReprefillTokens, on.ReprefillTokens, off.PrefixHitRate, on.PrefixHitRate, on.HintsByResult)
	}
}
