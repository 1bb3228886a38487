package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/hints"
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

func smallConfig(p Policy, workers, conc int) Config {
	c := DefaultConfig()
	c.Workers, c.Concurrency, c.Policy = workers, conc, p
	c.Engine.BlockSize = 16
	c.Engine.NumGPUBlocks = 4096
	c.Warmup, c.Window = 0, 10*time.Minute
	return c
}

func run(t testing.TB, w *trace.Workload, c Config) Result {
	t.Helper()
	res, err := Run(w, c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// One session, drawn again and again: inside a draw every turn finds the
// previous turn's prompt cached; a new draw is a new namespace and starts
// cold; the next turn waits for the previous one and its gap.
func TestSessionTurnsHitTheirPreviousPrompt(t *testing.T) {
	w := &trace.Workload{Name: "one", BlockSize: 64, Sessions: []*trace.Session{growing("s", 1, 6, 2*time.Second)}}
	var got []TurnResult
	c := smallConfig(PolicyKV, 1, 1)
	c.OnTurn = func(tr TurnResult) { got = append(got, tr) }
	res := run(t, w, c)
	if res.Turns != len(got) || res.SessionsCompleted < 3 {
		t.Fatalf("%d turns (%d seen), %d sessions completed", res.Turns, len(got), res.SessionsCompleted)
	}
	joined := 0
	for i, tr := range got {
		want := 0 // a session's first turn here, cold: its first, or where it joined
		if i > 0 && got[i-1].SessionID == tr.SessionID {
			want = len(w.Sessions[0].Turns[tr.Turn-1].Blocks) * 64 // every full block of the previous prompt
			if prev := got[i-1]; prev.Turn != tr.Turn-1 || tr.Sent < prev.Done+2*time.Second {
				t.Errorf("turn %d of %s sent at %v, after turn %d ended at %v", tr.Turn, tr.SessionID, tr.Sent, prev.Turn, prev.Done)
			}
		} else if tr.Turn > 0 {
			joined++ // the first draw joins mid-way
		}
		if tr.CachedTokens != want {
			t.Errorf("%s turn %d: cached %d, want %d", tr.SessionID, tr.Turn, tr.CachedTokens, want)
		}
		if tr.FirstToken <= tr.Sent || tr.Done <= tr.FirstToken {
			t.Errorf("turn %d timings %v %v %v", i, tr.Sent, tr.FirstToken, tr.Done)
		}
	}
	if joined > 1 {
		t.Errorf("%d sessions joined mid-way; only the first draw does", joined)
	}
	if res.EvictedRecomputedTokens != 0 || res.Preemptions != 0 {
		t.Errorf("evicted recomputed %d, preemptions %d", res.EvictedRecomputedTokens, res.Preemptions)
	}
	if res.PrefixHitRate <= 0.5 || math.Abs(res.PrefixHitRate-res.IdealHitRate) > 1e-9 {
		t.Errorf("hit rate %v, ideal %v: alone, a session gets the ideal", res.PrefixHitRate, res.IdealHitRate)
	}
	// Alone on an idle cluster, a session takes its time alone.
	if res.SlowdownP50 < 0.98 || res.SlowdownP99 > 1.02 {
		t.Errorf("slowdown p50 %.4f p99 %.4f alone", res.SlowdownP50, res.SlowdownP99)
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
	c := smallConfig(PolicyKV, 1, 1)
	c.Engine.BlockSize = 64
	c.OnTurn = func(tr TurnResult) { got = append(got, tr) }
	run(t, w, c)
	for i, tr := range got {
		if i == 0 || got[i-1].SessionID != tr.SessionID {
			continue // the session's first turn here: cold
		}
		if want := len(s.Turns[tr.Turn-1].Blocks) * 16; tr.CachedTokens != want {
			t.Errorf("turn %d cached %d want %d", tr.Turn, tr.CachedTokens, want)
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
	for _, p := range Policies {
		t.Run(string(p), func(t *testing.T) {
			c := smallConfig(p, 3, 6)
			c.Engine.NumGPUBlocks = 300 // pressure: evictions and preemptions
			a, b := run(t, w, c), run(t, w, c)
			if diff := cmp.Diff(a, b); diff != "" {
				t.Fatalf("same seed, different results:\n%s", diff)
			}
			if a.Turns == 0 || a.WindowS != 600 {
				t.Errorf("%d turns over %v s", a.Turns, a.WindowS)
			}
			c.Seed = 2
			if other := run(t, w, c); cmp.Equal(a, other) {
				t.Error("another seed, the same results")
			}
		})
	}
}

// Draw k is the same trace session for every policy: they all get the same
// work, in the same order, whatever pace they serve it at.
func TestDrawsAreTheSameWork(t *testing.T) {
	w := randomWorkload(11, 16)
	drawn := map[Policy]map[string]bool{}
	for _, p := range []Policy{PolicyRoundRobin, PolicyKV, PolicySessionAware} {
		drawn[p] = map[string]bool{}
		c := smallConfig(p, 2, 4)
		c.Engine.NumGPUBlocks = 300
		c.OnTurn = func(tr TurnResult) {
			if tr.ParentSessionID == "" && tr.Turn == 0 {
				drawn[p][tr.SessionID] = true // trace id @ draw number
			}
		}
		run(t, w, c)
	}
	for id := range drawn[PolicyKV] {
		draw := id[strings.Index(id, "@"):]
		for p, ids := range drawn {
			for other := range ids {
				if strings.HasSuffix(other, draw) && other != id {
					t.Errorf("draw %s is %s under kv but %s under %s", draw, id, other, p)
				}
			}
		}
	}
}

func TestSubagentBeforeParentTurn(t *testing.T) {
	w := randomWorkload(3, 4)
	done := map[string]time.Duration{}
	sent := map[string]time.Duration{}
	c := smallConfig(PolicySessionAware, 2, 4)
	c.OnTurn = func(tr TurnResult) {
		done[tr.SessionID] = max(done[tr.SessionID], tr.Done)
		sent[fmt.Sprintf("%s#%d", tr.SessionID, tr.Turn)] = tr.Sent
	}
	run(t, w, c)
	checked := 0
	for key, at := range sent {
		id, turn, _ := strings.Cut(key, "#")
		if strings.Contains(id, "/") {
			continue
		}
		ts := w.Sessions[traceIndex(t, w, id[:strings.Index(id, "@")])]
		var n int
		fmt.Sscan(turn, &n)
		for _, ch := range ts.Turns[n].Children {
			child := id + w.Sessions[ch].ID[len(ts.ID):]
			if d, ok := done[child]; !ok || at < d {
				t.Errorf("%s sent at %v before its sub-agent %s ended (%v, seen %v)", key, at, child, d, ok)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no parent turn waited for a sub-agent")
	}
}

func traceIndex(t *testing.T, w *trace.Workload, id string) int {
	for i, s := range w.Sessions {
		if s.ID == id {
			return i
		}
	}
	t.Fatalf("no session %q", id)
	return -1
}

func TestConcurrencyLimitsActiveSessions(t *testing.T) {
	w := randomWorkload(5, 12)
	active, peak := 0, 0
	first := map[string]bool{}
	c := smallConfig(PolicyRoundRobin, 2, 3)
	// Top-level sessions between their first and last turns' completions
	// (a lower bound of activity).
	c.OnTurn = func(tr TurnResult) {
		if tr.ParentSessionID != "" {
			return
		}
		if !first[tr.SessionID] {
			first[tr.SessionID] = true
			active++
			peak = max(peak, active)
		}
		if tr.Turn == len(w.Sessions[traceIndex(t, w, tr.SessionID[:strings.Index(tr.SessionID, "@")])].Turns)-1 {
			active--
		}
	}
	run(t, w, c)
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

// Only the window is measured, every policy over the same one, and the
// turns a policy holds back at its end count with their waits so far.
func TestWindowCountsOpenWaits(t *testing.T) {
	w := randomWorkload(9, 16)
	c := smallConfig(PolicyKVCap, 2, 8)
	c.SessionCap = 1 // two sessions at once: six always wait
	c.Warmup, c.Window = 2*time.Minute, 5*time.Minute
	var inWindow int
	c.OnTurn = func(tr TurnResult) {
		if tr.Done >= c.Warmup {
			inWindow++
		}
	}
	capped := run(t, w, c)
	if capped.WindowS != 300 || capped.WarmupS != 120 || capped.Turns != inWindow {
		t.Fatalf("window %v s after %v s, %d turns (%d completed in the window)", capped.WindowS, capped.WarmupS, capped.Turns, inWindow)
	}
	// Six sessions wait through the whole window: at least 6 × 300 s.
	if capped.OpenTurns < 6 || capped.PauseTimeS < 6*300 {
		t.Fatalf("open turns %d, pause %v s: the waiting sessions do not count", capped.OpenTurns, capped.PauseTimeS)
	}
	c.Policy = PolicyKV
	if kv := run(t, w, c); kv.WindowS != capped.WindowS || kv.PauseTimeS != 0 {
		t.Fatalf("kv: window %v s, pause %v s", kv.WindowS, kv.PauseTimeS)
	}

	// A session that waits the whole run is the slowest TTFT there is: it
	// joined within its turn's cycle (< 101 s) and waits until the end
	// (360 s), as the sessions ahead of it outlast the run.
	long := &trace.Workload{Name: "long", BlockSize: 64, Sessions: []*trace.Session{growing("s", 1, 40, 100*time.Second)}}
	c = smallConfig(PolicyKVCap, 1, 3)
	c.SessionCap = 1
	c.Warmup, c.Window = time.Minute, 5*time.Minute
	if r := run(t, long, c); r.OpenTurns < 1 || r.TTFTP99Ms < 259e3 {
		t.Fatalf("open turns %d, TTFT p99 %.0f ms: the waiting session's first turn does not count", r.OpenTurns, r.TTFTP99Ms)
	}
}

// The oracle (unbounded KV) never evicts and is the upper bound of every
// policy on a cluster whose KV overflows.
func TestOracleIsTheUpperBound(t *testing.T) {
	w := randomWorkload(13, 24)
	var oracle Result
	rows := map[Policy]Result{}
	for _, p := range Policies {
		c := smallConfig(p, 2, 12)
		c.Engine.NumGPUBlocks = 200
		rows[p] = run(t, w, c)
	}
	oracle = rows[PolicyOracle]
	if oracle.Preemptions != 0 || oracle.DeviceEvictions != 0 {
		t.Fatalf("oracle: %d preemptions, %d evictions", oracle.Preemptions, oracle.DeviceEvictions)
	}
	for p, r := range rows {
		t.Logf("%-14s %6.1f turns/min, hit %.3f of ideal %.3f", p, r.TurnsPerMin, r.PrefixHitRate, r.IdealHitRate)
	}
	for p, r := range rows {
		if r.TurnsPerMin > oracle.TurnsPerMin*1.0001 {
			t.Errorf("%s: %.1f turns/min above the oracle's %.1f", p, r.TurnsPerMin, oracle.TurnsPerMin)
		}
		if r.PrefixHitRate > r.IdealHitRate+1e-9 {
			t.Errorf("%s: hit rate %.4f above the ideal %.4f", p, r.PrefixHitRate, r.IdealHitRate)
		}
	}
}

// A session without a turn is never drawn: a trace of only such sessions is
// an error, not a draw that ends as it starts, again and again (it once
// recursed until the stack overflowed); beside a session with turns it is
// left out.
func TestSessionsWithoutTurnsAreNotDrawn(t *testing.T) {
	empty := &trace.Session{ID: "empty", Parent: -1}
	w := &trace.Workload{Name: "empty", BlockSize: 64, Sessions: []*trace.Session{empty}}
	if _, err := Run(w, smallConfig(PolicyKV, 1, 2)); err == nil || !strings.Contains(err.Error(), "no top-level session with a turn") {
		t.Fatalf("a trace of empty sessions: %v", err)
	}
	w.Sessions = append(w.Sessions, growing("s", 1, 3, time.Second))
	if pool := SplitSessions(w, SplitAll); !slices.Equal(pool, []int{1}) {
		t.Fatalf("draw pool %v, want only the session with turns", pool)
	}
	var drawn []string
	c := smallConfig(PolicyKV, 1, 2)
	c.OnTurn = func(tr TurnResult) { drawn = append(drawn, tr.SessionID) }
	if res := run(t, w, c); res.Turns == 0 {
		t.Fatal("no turn ran beside the empty session")
	}
	for _, id := range drawn {
		if strings.HasPrefix(id, "empty") {
			t.Fatalf("the empty session was drawn: %s", id)
		}
	}
}

// A context too short for a turn is refused by name; one that holds less
// than a turn's output cuts the output too, and the engines take every turn
// (a turn they refused panicked).
func TestShortContextsClipOrRefuse(t *testing.T) {
	// A prompt shorter than a block is not lengthened when the output is cut.
	short := &trace.Session{ID: "short", Parent: -1, Turns: []trace.Turn{{InputLen: 10, OutputLen: 100}, {InputLen: 12, OutputLen: 100, Gap: time.Second}}}
	w := &trace.Workload{Name: "one", BlockSize: 64, Sessions: []*trace.Session{growing("s", 1, 4, time.Second), short}}
	for _, tt := range []struct {
		maxModelLen int
		refused     bool
	}{{1, true}, {32, true}, {33, false}, {40, false}} {
		c := smallConfig(PolicyKV, 1, 1)
		c.Engine.Model.MaxModelLen = tt.maxModelLen
		for i := range w.Sessions[0].Turns {
			w.Sessions[0].Turns[i].OutputLen = 100 // more than the context
		}
		res, err := Run(w, c)
		if refused := err != nil; refused != tt.refused || !tt.refused && (res.Turns == 0 || res.ClippedTurns != res.Turns) {
			t.Errorf("max model len %d: %d turns (%d clipped), %v", tt.maxModelLen, res.Turns, res.ClippedTurns, err)
		}
	}
}

func TestSplitIsFixedAndDisjoint(t *testing.T) {
	w := randomWorkload(1, 40)
	tune, test, all := SplitSessions(w, SplitTune), SplitSessions(w, SplitTest), SplitSessions(w, SplitAll)
	if len(tune)+len(test) != len(all) || len(tune) == 0 || len(test) == 0 {
		t.Fatalf("tune %d + test %d != all %d", len(tune), len(test), len(all))
	}
	in := map[int]bool{}
	for _, i := range tune {
		in[i] = true
	}
	for _, i := range test {
		if in[i] {
			t.Fatalf("session %d in both halves", i)
		}
		if !InSplit(w.Sessions[i].ID, SplitTest) || InSplit(w.Sessions[i].ID, SplitTune) {
			t.Fatalf("session %s: split by id disagrees", w.Sessions[i].ID)
		}
	}
	// A run draws only from its split.
	c := smallConfig(PolicyKV, 2, 4)
	c.Split = SplitTune
	c.OnTurn = func(tr TurnResult) {
		if tr.ParentSessionID == "" && !InSplit(tr.SessionID[:strings.Index(tr.SessionID, "@")], SplitTune) {
			t.Fatalf("tune run served %s", tr.SessionID)
		}
	}
	run(t, w, c)
}

func TestAggregate(t *testing.T) {
	a := Result{Policy: "kv", Concurrency: 4, WindowS: 60, Turns: 10, TurnsPerMin: 10, PrefixHitRate: 0.5}
	b, c := a, a
	b.TurnsPerMin, c.TurnsPerMin = 14, 12
	row, err := Aggregate([]Result{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	if row.Seeds != 3 || row.TurnsPerMin != 12 || row.TurnsPerMinMin != 10 || row.TurnsPerMinMax != 14 || row.PrefixHitRate != 0.5 {
		t.Fatalf("%+v", row)
	}
	other := row
	other.TurnsPerMinMin, other.TurnsPerMinMax = 14.5, 16
	if Tie(row, other) || !Tie(row, row) {
		t.Fatal("tie")
	}
	// A run in which nothing completed counts in turns/min, not in the
	// metrics of turns.
	idle := Result{Policy: "kv", Concurrency: 4, WindowS: 60}
	row, err = Aggregate([]Result{a, b, idle})
	if err != nil {
		t.Fatal(err)
	}
	if row.SeedsWithTurns != 2 || row.PrefixHitRate != 0.5 || row.TurnsPerMin != 8 || row.TurnsPerMinMin != 0 {
		t.Fatalf("with an idle run: %+v", row)
	}
	c.WindowS = 30
	if _, err := Aggregate([]Result{a, c}); err == nil {
		t.Fatal("aggregated runs of different windows")
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
	runPool := func(pages int) Result {
		c := smallConfig(PolicyKV, 2, 6)
		c.Engine.NumGPUBlocks = 96 // 1,536 tokens: a few turns' prompts
		c.SharedPool = PoolConfig{Pages: pages}
		c.SharedPool.Layout.TPSize = 2
		return run(t, w, c)
	}
	without, with := runPool(0), runPool(4096)
	if without.SharedHitTokens != 0 || with.SharedHitTokens == 0 || with.PoolWrites == 0 {
		t.Fatalf("shared hits without pool %d, with %d (pool writes %d)", without.SharedHitTokens, with.SharedHitTokens, with.PoolWrites)
	}
	if with.PrefixHitRate <= without.PrefixHitRate {
		t.Fatalf("the pool did not help: hit rate %.3f -> %.3f", without.PrefixHitRate, with.PrefixHitRate)
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
	if again := runPool(4096); !cmp.Equal(again, with) {
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
	for _, p := range []Policy{PolicyKV, PolicySessionAware} {
		runHints := func(on bool) Result {
			c := smallConfig(p, 2, 8)
			c.Engine.NumGPUBlocks = 128
			c.Engine.HostBlocks = 256
			if on {
				hc := hints.DefaultConfig()
				hc.Disabled = nil // every policy, demote on long tool calls included
				c.Hints = &hc
			}
			return run(t, w, c)
		}
		off, on := runHints(false), runHints(true)
		if off.HintsSent != 0 || on.HintsSent == 0 || on.HintBlocksMoved == 0 {
			t.Fatalf("%s: hints sent %d without, %d with (%d blocks moved, %v)", p, off.HintsSent, on.HintsSent, on.HintBlocksMoved, on.HintsByResult)
		}
		if again := runHints(true); !cmp.Equal(again, on) {
			t.Fatalf("%s: same seed, different result:\n%s", p, cmp.Diff(on, again))
		}
		t.Logf("%s: evicted recomputed %d -> %d tokens, hit %.3f -> %.3f, hints %v", p, off.EvictedRecomputedTokens, on.EvictedRecomputedTokens, off.PrefixHitRate, on.PrefixHitRate, on.HintsByResult)
	}
}

// At concurrency 1 nothing overflows: every policy keeps what it routed
// (hit rate = routed ideal), and every policy that follows the cache gets
// the fleet-wide ideal; the load balancers lose hits to routing only.
func TestConcurrencyOneReachesTheIdeal(t *testing.T) {
	w := randomWorkload(17, 12)
	for _, p := range Policies {
		c := smallConfig(p, 3, 1)
		c.Window = 30 * time.Minute
		r := run(t, w, c)
		if math.Abs(r.PrefixHitRate-r.RoutedIdealHitRate) > 1e-9 || r.EvictedRecomputedTokens != 0 {
			t.Errorf("%s: hit rate %.4f, routed ideal %.4f, %d evicted tokens recomputed", p, r.PrefixHitRate, r.RoutedIdealHitRate, r.EvictedRecomputedTokens)
		}
		cacheBlind := p == PolicyRoundRobin || p == PolicyLeastLoaded
		if reached := math.Abs(r.PrefixHitRate-r.IdealHitRate) < 1e-9; reached == cacheBlind {
			t.Errorf("%s: hit rate %.4f, ideal %.4f", p, r.PrefixHitRate, r.IdealHitRate)
		}
	}
}

// The first sessions join as a running fleet would show them: drawn in
// proportion to their duration (long sessions are most of what is active
// at any moment) and at a random turn of it, their cache cold.
func TestFirstSessionsJoinMidway(t *testing.T) {
	w := &trace.Workload{Name: "mix", BlockSize: 64}
	for i := range 10 {
		w.Sessions = append(w.Sessions, growing(fmt.Sprintf("short%d", i), uint64(2*i+1), 2, 5*time.Second))
		w.Sessions = append(w.Sessions, growing(fmt.Sprintf("long%d", i), uint64(2*i+2), 30, 5*time.Second))
	}
	c := smallConfig(PolicyKV, 2, 20)
	c.Window = 2 * time.Minute
	first := map[string]TurnResult{}
	c.OnTurn = func(tr TurnResult) {
		if _, seen := first[tr.SessionID]; !seen && tr.ParentSessionID == "" {
			first[tr.SessionID] = tr
		}
	}
	run(t, w, c)
	long, later := 0, 0
	for id, tr := range first {
		draw := id[strings.Index(id, "@")+1:]
		if n, _ := strconv.Atoi(draw); n > c.Concurrency {
			continue // drawn as a session ended: starts at its first turn
		}
		if strings.HasPrefix(id, "long") {
			long++
		}
		if tr.Turn > 0 {
			later++
			if tr.CachedTokens != 0 {
				t.Errorf("%s joined at turn %d with %d tokens cached", id, tr.Turn, tr.CachedTokens)
			}
		}
	}
	t.Logf("of the first 20: %d long, %d joined after their first turn", long, later)
	// Long sessions are 30 of every 32 turns' time: expect ~19 of 20.
	if long < 16 || later < 14 {
		t.Errorf("of the first 20 sessions, %d are long and %d joined after their first turn", long, later)
	}
}

// With HeldFromIndex, replay answers the pipeline's holding queries from
// the simulated engines' index before each tick: under pressure the same
// seed gives the same result, and a different one from counting idle
// programs whole (the answers changed admission's decisions).
func TestHeldFromIndexInReplay(t *testing.T) {
	w := randomWorkload(7, 24)
	runHeld := func(on bool) Result {
		c := smallConfig(PolicySessionAware, 3, 12)
		c.Engine.NumGPUBlocks = 300 // pressure: the engines evict idle programs
		ac := admission.DefaultConfig()
		ac.HeldFromIndex = on
		ac.ResidentRetention = 0
		c.Admission = &ac
		return run(t, w, c)
	}
	off, on := runHeld(false), runHeld(true)
	if again := runHeld(true); !cmp.Equal(again, on) {
		t.Fatalf("same seed, different result:\n%s", cmp.Diff(on, again))
	}
	if cmp.Equal(off, on) {
		t.Fatal("counting what the index says idle programs hold changed nothing")
	}
	t.Logf("turns %d -> %d, hit %.3f -> %.3f, pauses %d -> %d", off.Turns, on.Turns, off.PrefixHitRate, on.PrefixHitRate, off.Pauses, on.Pauses)
}

// How a session ends reaches the pipeline as the option says, and each
// way releases the session's program: the pipeline is told at the walk's
// end (explicit), or the session's last turn is marked final, asks the
// engine to retain nothing and releases the program as it finishes
// (final), or nothing is said and the program expires after the idle TTL
// (idle).
func TestSessionEnd(t *testing.T) {
	w := randomWorkload(3, 12)
	for _, end := range []SessionEnd{SessionEndExplicit, SessionEndFinal, SessionEndIdle} {
		t.Run(string(end), func(t *testing.T) {
			c := smallConfig(PolicySessionAware, 2, 4)
			c.SessionEnd = end
			a := admission.DefaultConfig()
			a.IdleTTL = 30 * time.Second
			c.Admission = &a
			var ends, finals, lasts int
			gone := map[string]int{} // programs released or expired, by the call that did it
			c.Calls = func(call Call) {
				for _, ev := range call.Events {
					if ev.Reason == admission.ReasonReleased || ev.Reason == admission.ReasonExpired {
						gone[string(call.Op)+" "+ev.Reason]++
					}
				}
				switch call.Op {
				case CallEndSession:
					ends++
				case CallPlace:
					if call.Turn.Final {
						finals++
						if call.Placement.Retain != 0 {
							t.Errorf("%s: a final turn retained %v", call.Turn.RequestID, call.Placement.Retain)
						}
					}
				}
			}
			c.OnTurn = func(tr TurnResult) {
				if !tr.ToolCall { // growing: only a session's last turn calls no tool
					lasts++
				}
			}
			res := run(t, w, c)
			if res.SessionsCompleted == 0 || lasts == 0 {
				t.Fatalf("%d sessions completed, %d last turns", res.SessionsCompleted, lasts)
			}
			// Each way, the programs of the sessions that completed are gone.
			var by string
			switch end {
			case SessionEndExplicit:
				if ends < res.SessionsCompleted || finals != 0 {
					t.Errorf("%d ends told, %d final turns; %d sessions completed", ends, finals, res.SessionsCompleted)
				}
				by = "end_session released"
			case SessionEndFinal:
				if ends != 0 || finals < lasts {
					t.Errorf("%d ends told, %d final turns; %d last turns", ends, finals, lasts)
				}
				by = "finish released"
			case SessionEndIdle:
				if ends != 0 || finals != 0 {
					t.Errorf("%d ends told, %d final turns", ends, finals)
				}
				by = "tick expired"
			}
			t.Logf("%d sessions completed; programs gone %v", res.SessionsCompleted, gone)
			if gone[by] < res.SessionsCompleted || len(gone) != 1 {
				t.Errorf("programs gone %v; want at least %d by %q", gone, res.SessionsCompleted, by)
			}
		})
	}
	if _, err := ParseSessionEnd("never"); err == nil {
		t.Error("an unknown session end parsed")
	}
}
