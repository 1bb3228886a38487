package admission

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newCtl builds a controller on ThunderAgent's exact policy (the threshold
// arithmetic of these tests assumes ACTING weight 1), changed by mod.
func newCtl(t testing.TB, mod func(*Config)) *Controller {
	t.Helper()
	cfg := ThunderAgentConfig()
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func key(s string) Key { return Key{Tenant: "t", SessionID: s} }

// start admits a turn and, when it needs placing, places it on worker.
func start(t testing.TB, c *Controller, now time.Time, s string, prompt int64, worker string) Admission {
	t.Helper()
	a := c.Admit(now, Turn{Key: key(s), PromptTokens: prompt}, nil)
	if a.Verdict != Run {
		t.Fatalf("%s: verdict %v, want run", s, a.Verdict)
	}
	if a.Worker == "" {
		c.Placed(now, key(s), worker)
	}
	return a
}

// acting puts a program on worker in ACTING with tokens as its working set.
func acting(t testing.TB, c *Controller, now time.Time, s string, tokens int64, worker string) {
	t.Helper()
	start(t, c, now, s, tokens, worker)
	c.Finish(now, key(s), tokens, 0, nil)
}

func prog(t testing.TB, c *Controller, s string) Program {
	t.Helper()
	p, ok := c.Get(key(s))
	if !ok {
		t.Fatalf("program %s lost", s)
	}
	return p
}

func TestDefaultsMatchThunderAgent(t *testing.T) {
	c := ThunderAgentConfig()
	if c.PauseThreshold != 0.95 || c.PauseTarget != 0.80 || c.SoftDemoteThreshold != 0.80 ||
		c.SoftDemotePriorityJump != -2.0 || c.ResumeHysteresis != 0.10 || c.ResumePriorityBoost != 1.0 ||
		c.ResumeTimeout != 30*time.Minute || c.ActingTokenWeight != 1.0 || c.ActingDecayTau != time.Second ||
		c.TickInterval != 5*time.Second || c.BufferPerProgram != 100 || c.IdleTTL != 600*time.Second {
		t.Fatalf("defaults drifted from dynamo.md §4: %+v", c)
	}
	if got := c.ResumeCeiling(); got < 0.85-1e-12 || got > 0.85+1e-12 {
		t.Fatalf("resume ceiling %v", got)
	}
	if d := DefaultConfig(); c.ResumeOnLastWorker || c.ResumeOversized || !d.ResumeOnLastWorker || !d.ResumeOversized || d.ActingTokenWeight != 1 ||
		c.CapacityTiers != 0 || d.CapacityTiers != 0 || c.ColdLane != 0 || d.ColdLane != 1 || c.ResidentRetention != 0 || d.ResidentRetention == 0 ||
		c.RotateAfter != 0 || d.RotateAfter == 0 || c.HeldFromIndex || !d.HeldFromIndex {
		t.Fatalf("thunderagent %+v, switchyard %+v", c, d)
	}
	bad := c
	bad.PauseTarget = 0.99
	if bad.Validate() == nil {
		t.Fatal("target above threshold accepted")
	}
	// NaN compares as in range everywhere: it is refused by name.
	for _, set := range []func(*Config){
		func(c *Config) { c.PauseThreshold = math.NaN() },
		func(c *Config) { c.ActingTokenWeight = math.NaN() },
		func(c *Config) { c.SoftDemotePriorityJump = math.Inf(-1) },
	} {
		bad := DefaultConfig()
		set(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "finite") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestAdmitPlaceFinish(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	c.SetWorker("b", Capacity{Tokens: 1_000})
	a := c.Admit(t0, Turn{Key: key("s"), PromptTokens: 2_000}, nil)
	if a.Verdict != Run || a.Worker != "" || len(a.Room) != 1 || a.Room[0] != "a" {
		t.Fatalf("admission %+v: want run with room [a]", a)
	}
	c.Placed(t0, key("s"), "a")
	p := prog(t, c, "s")
	if p.Phase != Reasoning || p.Lifecycle != Active || p.Worker != "a" || p.InFlight != 1 {
		t.Fatalf("after place: %+v", p)
	}
	if u := c.Utilization(t0)[0]; u.Used != 2_100 || u.Reasoning != 1 {
		t.Fatalf("util %+v", u)
	}
	ev := c.Finish(t0.Add(time.Second), key("s"), 2_000, 500, nil)
	if len(ev) != 1 || ev[0].Reason != ReasonActing {
		t.Fatalf("finish events %+v", ev)
	}
	p = prog(t, c, "s")
	if p.Phase != Acting || p.TokenTotal != 2_500 || p.StepCount != 1 || p.InFlight != 0 {
		t.Fatalf("after finish: %+v", p)
	}
	// The next turn is pinned to a.
	a = c.Admit(t0.Add(2*time.Second), Turn{Key: key("s"), PromptTokens: 2_600}, nil)
	if a.Verdict != Run || a.Worker != "a" || len(a.Events) != 1 || a.Events[0].Reason != ReasonReasoning {
		t.Fatalf("second turn %+v", a)
	}
}

func TestUnknownCapacityMeansAnyWorker(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{})
	a := c.Admit(t0, Turn{Key: key("s"), PromptTokens: 1 << 40}, nil)
	if a.Verdict != Run || a.Room != nil {
		t.Fatalf("%+v", a)
	}
}

func TestPauseThresholdCrossing(t *testing.T) {
	// cap 10,000; buffer 100. Over means used > 9,500.
	for _, tt := range []struct {
		name   string
		tokens []int64 // ACTING programs
		paused []string
	}{
		{"at threshold: nothing", []int64{1000, 2000, 3000, 3100}, nil}, // 9,100 + 400 = 9,500
		{"just over: shed smallest until ≤ 8,000", []int64{1000, 2000, 3000, 3101}, []string{"p0", "p1"}},
		{"one big program is enough", []int64{900, 8701}, []string{"p0", "p1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCtl(t, nil)
			c.SetWorker("a", Capacity{Tokens: 10_000})
			for i, tok := range tt.tokens {
				acting(t, c, t0, "p"+string(rune('0'+i)), tok, "a")
			}
			rep := c.Tick(t0)
			var got []string
			for _, p := range c.List(Filter{Lifecycle: Paused}) {
				got = append(got, p.Key.SessionID)
			}
			if len(got) != len(tt.paused) {
				t.Fatalf("paused %v, want %v (report %+v)", got, tt.paused, rep.Workers)
			}
			for i := range got {
				if got[i] != tt.paused[i] {
					t.Fatalf("paused %v, want %v", got, tt.paused)
				}
			}
			if len(tt.paused) > 0 && c.Utilization(t0)[0].Utilization > 0.80 {
				t.Fatalf("still above target: %+v", c.Utilization(t0)[0])
			}
		})
	}
}

func TestMarkReasoningWhenActingIsNotEnough(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "act", 500, "a")
	start(t, c, t0, "r1", 3_000, "a")
	start(t, c, t0, "r2", 2_000, "a")
	start(t, c, t0, "r3", 4_000, "a")
	// used = 9,500 + 400 = 9,900 > 9,500. Pausing act → 9,300 > 8,000; mark
	// r2 (2,100) → 7,200 ≤ 8,000.
	rep := c.Tick(t0)
	if rep.Paused != 1 || rep.Marked != 1 {
		t.Fatalf("paused %d marked %d", rep.Paused, rep.Marked)
	}
	if !prog(t, c, "r2").MarkedForPause || prog(t, c, "r1").MarkedForPause {
		t.Fatal("wrong program marked")
	}
	// The mark takes effect at the tool boundary, never mid-generation.
	if prog(t, c, "r2").Lifecycle != Active {
		t.Fatal("marked program paused mid-turn")
	}
	ev := c.Finish(t0.Add(time.Second), key("r2"), 2_000, 100, nil)
	if len(ev) != 2 || ev[1].Reason != ReasonPaused || prog(t, c, "r2").Lifecycle != Paused {
		t.Fatalf("events %+v", ev)
	}
	// A second tick does not mark again: the projection already fits.
	if rep := c.Tick(t0.Add(time.Second)); rep.Marked != 0 {
		t.Fatalf("marked again: %+v", rep)
	}
}

func TestCountThreshold(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{MaxPrograms: 10})
	for i := range 10 {
		start(t, c, t0, "r"+string(rune('a'+i)), 100, "a")
	}
	// 10 REASONING > 9.5: mark until ≤ 8.
	rep := c.Tick(t0)
	if rep.Marked != 2 {
		t.Fatalf("marked %d, want 2", rep.Marked)
	}
}

func TestSoftDemoteBand(t *testing.T) {
	for _, tt := range []struct {
		tokens  int64 // one ACTING program; +100 buffer
		demoted bool
	}{
		{7_800, false}, // 0.79
		{7_900, true},  // 0.80
		{9_400, true},  // 0.95: not over
		{9_401, false}, // over: paused instead
	} {
		c := newCtl(t, nil)
		c.SetWorker("a", Capacity{Tokens: 10_000})
		acting(t, c, t0, "p", tt.tokens, "a")
		rep := c.Tick(t0)
		if got := rep.SoftDemoted == 1; got != tt.demoted {
			t.Fatalf("tokens %d: demoted %v, want %v", tt.tokens, got, tt.demoted)
		}
		if !tt.demoted {
			continue
		}
		a := c.Admit(t0.Add(7*time.Second), Turn{Key: key("p"), PromptTokens: tt.tokens}, nil)
		if a.PriorityJump != -2 {
			t.Fatalf("jump %v within 1.5 ticks", a.PriorityJump)
		}
		c.Finish(t0.Add(7*time.Second), key("p"), tt.tokens, 0, nil)
		a = c.Admit(t0.Add(7500*time.Millisecond), Turn{Key: key("p"), PromptTokens: tt.tokens}, nil)
		if a.PriorityJump != 0 {
			t.Fatalf("jump %v after the window", a.PriorityJump)
		}
	}
}

// pauseSmall leaves "small" (2,000 tokens) paused and "big" (7,800)
// ACTING on a worker of 10,000 since t0: at the tick big was still
// generating, so pausing small was enough (10,000 → 7,900).
func pauseSmall(t *testing.T) *Controller {
	t.Helper()
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "small", 2_000, "a")
	start(t, c, t0, "big", 7_800, "a")
	if rep := c.Tick(t0); rep.Paused != 1 || rep.Marked != 0 {
		t.Fatalf("setup tick %+v", rep)
	}
	c.Finish(t0, key("big"), 7_700, 100, nil)
	if prog(t, c, "small").Lifecycle != Paused {
		t.Fatal("small not paused")
	}
	return c
}

func TestPausedTurnWaitsUntilResumed(t *testing.T) {
	c := pauseSmall(t)
	a := c.Admit(t0.Add(time.Second), Turn{Key: key("small"), PromptTokens: 2_100}, nil)
	if a.Verdict != Wait || a.Waiter == nil {
		t.Fatalf("paused program's turn: %+v", a)
	}
	select {
	case <-a.Waiter.Ready():
		t.Fatal("ready before resume")
	default:
	}
	if prog(t, c, "small").Waiting != 1 {
		t.Fatal("waiting turn not counted")
	}
	// big's tool has run 3 s: its decayed use is 7,800·2^-3 + 100 = 1,075,
	// leaving 7,425 of headroom below the 0.85 ceiling.
	rep := c.Tick(t0.Add(3 * time.Second))
	if rep.Resumed != 1 {
		t.Fatalf("resumed %d", rep.Resumed)
	}
	mustBeWoken(t, a.Waiter, "waiter not woken")
	a = c.Admit(t0.Add(3*time.Second), Turn{Key: key("small"), PromptTokens: 2_100}, a.Waiter)
	if a.Verdict != Run || a.Worker != "a" || a.PriorityJump != 1.0 {
		t.Fatalf("after resume %+v", a)
	}
	p := prog(t, c, "small")
	if p.PausedTotal != 3*time.Second || p.Waiting != 0 {
		t.Fatalf("paused total %v waiting %d", p.PausedTotal, p.Waiting)
	}
}

func TestResumeRespectsDecayedHeadroom(t *testing.T) {
	c := pauseSmall(t)
	// 0.1 s into big's tool: 7,800·2^-0.1 + 100 ≈ 7,378; headroom ≈ 1,122
	// < 2,100.
	if rep := c.Tick(t0.Add(100 * time.Millisecond)); rep.Resumed != 0 {
		t.Fatalf("resumed into no room: %+v", rep)
	}
}

// squeeze pauses ACTING programs by shrinking a worker's capacity for one
// tick (as a shim reporting less KV would), then restores it.
func squeeze(t *testing.T, c *Controller, now time.Time, worker string, small, full int64) TickReport {
	t.Helper()
	c.SetWorker(worker, Capacity{Tokens: small})
	rep := c.Tick(now)
	c.SetWorker(worker, Capacity{Tokens: full})
	return rep
}

// packingSetup pauses p2…p5 (2,500, 2,000, 2,400 and 100 tokens), which ran
// on worker a, with REASONING programs holding 3,500 of a and 5,500 of b
// (10,000 tokens each, no buffer).
func packingSetup(t *testing.T, resumeOnLastWorker bool) *Controller {
	t.Helper()
	c := newCtl(t, func(cfg *Config) { cfg.BufferPerProgram = 0; cfg.ResumeOnLastWorker = resumeOnLastWorker })
	c.SetWorker("a", Capacity{Tokens: 10_000})
	c.SetWorker("b", Capacity{Tokens: 10_000})
	start(t, c, t0, "holdA", 3_500, "a")
	start(t, c, t0, "holdB", 5_500, "b")
	for _, p := range []struct {
		s string
		n int64
	}{{"p2", 2_500}, {"p3", 2_000}, {"p4", 2_400}, {"p5", 100}} {
		acting(t, c, t0, p.s, p.n, "a")
	}
	if rep := squeeze(t, c, t0, "a", 4_000, 10_000); rep.Paused != 4 {
		t.Fatalf("setup: %+v", rep)
	}
	return c
}

func TestBestFitDecreasing(t *testing.T) {
	c := packingSetup(t, false)
	// Headroom a: 8,500 − 3,500 = 5,000; b: 8,500 − 5,500 = 3,000. All four
	// fit the total (7,000 ≤ 8,000); largest first onto the most headroom:
	// p2→a (a 2,500), p4→b (b 600), p3→a (a 500), p5→b (b 500).
	rep := c.Tick(t0.Add(time.Minute))
	if rep.Resumed != 4 {
		t.Fatalf("resumed %d: %+v", rep.Resumed, rep.Workers)
	}
	want := map[string]string{"p2": "a", "p4": "b", "p3": "a", "p5": "b"}
	for s, w := range want {
		if got := prog(t, c, s).Worker; got != w {
			t.Errorf("%s on %q, want %s", s, got, w)
		}
	}
	if prog(t, c, "holdA").MarkedForPause {
		t.Error("mark kept on a worker back under target")
	}
}

func TestNewProgramsQueueBehindPaused(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.BufferPerProgram = 0 })
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "idle", 1_000, "a")
	acting(t, c, t0, "back", 3_000, "a")
	start(t, c, t0, "hold", 1_000, "a")
	squeeze(t, c, t0, "a", 4_000, 10_000) // idle, back paused
	n := c.Admit(t0, Turn{Key: key("new"), PromptTokens: 500}, nil)
	if n.Verdict != Wait || len(n.Events) != 1 || n.Events[0].Reason != ReasonQueued {
		t.Fatalf("new program did not queue: %+v", n)
	}
	b := c.Admit(t0, Turn{Key: key("back"), PromptTokens: 3_000}, nil)
	if b.Verdict != Wait {
		t.Fatal("paused turn ran")
	}
	c.Tick(t0.Add(time.Second))
	for _, s := range []string{"back", "new", "idle"} {
		if prog(t, c, s).Lifecycle != Active {
			t.Errorf("%s not resumed", s)
		}
	}
	a := c.Admit(t0.Add(time.Second), Turn{Key: key("new"), PromptTokens: 500}, n.Waiter)
	if a.Verdict != Run || a.Worker != "a" {
		t.Fatalf("new after resume: %+v", a)
	}
}

func TestResumeGroupsReturningTurnsFirst(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.BufferPerProgram = 0 })
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "idle", 1_000, "a")
	acting(t, c, t0, "back", 1_200, "a")
	start(t, c, t0, "hold", 7_300, "a")
	squeeze(t, c, t0, "a", 5_000, 10_000)
	c.Admit(t0, Turn{Key: key("back"), PromptTokens: 1_200}, nil)
	// Headroom 8,500 − 7,300 = 1,200: room for one. The returning turn
	// beats the smaller idle program.
	c.Tick(t0.Add(time.Minute))
	if prog(t, c, "back").Lifecycle != Active || prog(t, c, "idle").Lifecycle != Paused {
		t.Fatalf("back %v idle %v", prog(t, c, "back").Lifecycle, prog(t, c, "idle").Lifecycle)
	}
}

func TestForcedResume(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	c.SetWorker("b", Capacity{Tokens: 10_000})
	start(t, c, t0, "holdB", 8_000, "b")
	acting(t, c, t0, "p", 1_000, "a")
	start(t, c, t0, "holdA", 8_500, "a")
	c.Tick(t0)
	if prog(t, c, "p").Lifecycle != Paused {
		t.Fatal("setup")
	}
	w := c.Admit(t0, Turn{Key: key("p"), PromptTokens: 1_000}, nil)
	// Both workers stay too full for p to fit below the ceiling.
	if rep := c.Tick(t0.Add(30*time.Minute - time.Second)); rep.Resumed+rep.ForcedResumed != 0 {
		t.Fatalf("resumed early: %+v", rep)
	}
	rep := c.Tick(t0.Add(30 * time.Minute))
	if rep.ForcedResumed != 1 || prog(t, c, "p").Worker != "b" {
		t.Fatalf("forced %d onto %q, want b (least utilized)", rep.ForcedResumed, prog(t, c, "p").Worker)
	}
	mustBeWoken(t, w.Waiter, "waiter not woken by forced resume")
}

func TestIdleRelease(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "p", 1_000, "a")
	if rep := c.Tick(t0.Add(600*time.Second - time.Millisecond)); rep.Expired != 0 {
		t.Fatal("expired early")
	}
	rep := c.Tick(t0.Add(600 * time.Second))
	if rep.Expired != 1 || prog(t, c, "p").Lifecycle != Terminated {
		t.Fatalf("not expired: %+v", rep)
	}
	if c.Utilization(t0)[0].Used != 0 {
		t.Fatal("expired program still counted")
	}
	// Kept readable for the retention, then dropped.
	c.Tick(t0.Add(600*time.Second + time.Minute))
	if _, ok := c.Get(key("p")); ok {
		t.Fatal("terminated program not pruned")
	}
	// A REASONING program is never idle-released.
	start(t, c, t0, "r", 10, "a")
	if rep := c.Tick(t0.Add(time.Hour)); rep.Expired != 0 {
		t.Fatal("generating program expired")
	}
}

// A turn marked the session's last is admitted as any other and releases
// the program when it ends, with no turn of it left in flight: released
// early it went uncounted while it ran, and a paused program's final turn
// ran at once on a worker admission had emptied of it.
func TestSessionFinalReleasesWhenItEnds(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "p", 1_000, "a")
	a := c.Admit(t0, Turn{Key: key("p"), PromptTokens: 1_200, Final: true}, nil)
	if a.Verdict != Run || a.Worker != "a" || a.Retain != 0 {
		t.Fatalf("final turn: %+v, want run on a, nothing retained", a)
	}
	if p := prog(t, c, "p"); p.Lifecycle != Active || c.Utilization(t0)[0].Used < 1_200 {
		t.Fatalf("while the final turn runs: %v, used %v, want ACTIVE and counted", p.Lifecycle, c.Utilization(t0)[0].Used)
	}
	// A second turn of it in flight keeps it until that one ends too.
	start(t, c, t0, "p", 1_300, "a")
	if evs := c.Finish(t0, key("p"), 1_200, 10, nil); prog(t, c, "p").Lifecycle != Active || len(evs) != 0 {
		t.Fatalf("released with a turn in flight: %+v", evs)
	}
	evs := c.Finish(t0, key("p"), 1_300, 10, nil)
	if len(evs) != 1 || evs[0].Reason != ReasonReleased || prog(t, c, "p").Lifecycle != Terminated || c.Utilization(t0)[0].Used != 0 {
		t.Fatalf("after the last turn: %+v, %v", evs, prog(t, c, "p").Lifecycle)
	}
	if c.Finish(t0, key("p"), 10, 10, nil) != nil || prog(t, c, "p").Lifecycle != Terminated {
		t.Fatal("a finish after the release revived the program")
	}

	// A final turn superseded by another attempt (its worker failed; the
	// frontend migrates it) releases nothing: the retry runs as the same
	// program, on its worker, and releases it when it finishes.
	acting(t, c, t0, "q", 500, "a")
	c.Admit(t0, Turn{Key: key("q"), PromptTokens: 600, Final: true}, nil)
	c.Supersede(t0, key("q"))
	if p := prog(t, c, "q"); p.Lifecycle != Active || p.Worker != "a" {
		t.Fatalf("after a superseded final turn: %v, on %q", p.Lifecycle, p.Worker)
	}
	if a := c.Admit(t0, Turn{Key: key("q"), PromptTokens: 600, Final: true}, nil); a.Verdict != Run || a.Worker != "a" {
		t.Fatalf("the migrated final turn: %+v", a)
	}
	if evs := c.Finish(t0, key("q"), 600, 1, nil); len(evs) != 1 || evs[0].Reason != ReasonReleased {
		t.Fatalf("the migrated final turn's finish: %+v", evs)
	}

	// A final turn cancelled with no attempt to follow (the client left
	// before its first token) ends the session all the same; a turn beside
	// it superseded meanwhile does not undo that.
	acting(t, c, t0, "r", 500, "a")
	start(t, c, t0, "r", 550, "a")
	c.Admit(t0, Turn{Key: key("r"), PromptTokens: 600, Final: true}, nil)
	c.Supersede(t0, key("r")) // the other turn moves to another worker...
	start(t, c, t0, "r", 550, "a")
	c.Cancel(t0, key("r")) // ...the final one is given up
	if evs := c.Finish(t0, key("r"), 550, 1, nil); len(evs) != 1 || evs[0].Reason != ReasonReleased {
		t.Fatalf("after the final turn was given up and the other finished: %+v (%v)", evs, prog(t, c, "r").Lifecycle)
	}
}

// A paused program's final turn waits for its resume like any other, and a
// new session whose only turn is final is a new program: queued or shed as
// one.
func TestSessionFinalIsAdmitted(t *testing.T) {
	c, paused := shedding(t, nil)
	now := t0.Add(2 * time.Second)
	if a := c.Admit(now, Turn{Key: key(paused), PromptTokens: 100, Final: true}, nil); a.Verdict != Wait {
		t.Fatalf("a paused program's final turn: %v, want wait", a.Verdict)
	}
	if a := c.Admit(now, Turn{Key: key("one-shot"), PromptTokens: 100, Final: true}, nil); a.Verdict != Shed {
		t.Fatalf("a new session's final turn while a fleet's worth is paused: %v, want shed", a.Verdict)
	}
}

func TestAbandonReleasesQueuedNewProgram(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 1_000})
	a := c.Admit(t0, Turn{Key: key("huge"), PromptTokens: 5_000}, nil)
	if a.Verdict != Wait {
		t.Fatalf("no room but %+v", a)
	}
	ev := c.Abandon(t0.Add(time.Second), a.Waiter, true)
	if len(ev) != 1 || prog(t, c, "huge").Lifecycle != Terminated {
		t.Fatalf("events %+v", ev)
	}
	if c.Abandon(t0, a.Waiter, true) != nil {
		t.Fatal("double abandon")
	}
}

// TestAbandonedFinalTurnReleasesItsProgram: a paused program whose final
// turn's client left while it waited is released, as that turn's finish
// would have released it; one whose abandoned turn was not its last stays,
// and so does one whose final turn's deadline passed (it is retried).
func TestAbandonedFinalTurnReleasesItsProgram(t *testing.T) {
	for _, tc := range []struct{ final, gone, released bool }{
		{true, true, true}, {false, true, false}, {true, false, false},
	} {
		c, paused := shedding(t, nil) // one of two programs paused
		a := c.Admit(t0.Add(2*time.Second), Turn{Key: key(paused), PromptTokens: 5_000, Final: tc.final}, nil)
		if a.Verdict != Wait {
			t.Fatalf("%+v: the paused program's turn: %v, want wait", tc, a.Verdict)
		}
		c.Abandon(t0.Add(3*time.Second), a.Waiter, tc.gone)
		if got, want := prog(t, c, paused).Lifecycle, map[bool]Lifecycle{true: Terminated, false: Paused}[tc.released]; got != want {
			t.Errorf("%+v: abandoned turn's program %v, want %v", tc, got, want)
		}
	}
}

func TestRemoveWorkerUnplaces(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	c.SetWorker("b", Capacity{Tokens: 10_000})
	acting(t, c, t0, "p", 1_000, "a")
	ev := c.RemoveWorker(t0, "a")
	if len(ev) != 1 || ev[0].Reason != ReasonUnplaced {
		t.Fatalf("%+v", ev)
	}
	a := c.Admit(t0, Turn{Key: key("p"), PromptTokens: 1_100}, nil)
	if a.Verdict != Run || a.Worker != "" || len(a.Room) != 1 || a.Room[0] != "b" {
		t.Fatalf("%+v", a)
	}
}

func TestResumeOnLastWorker(t *testing.T) {
	// Where best fit sends p4 to b (TestBestFitDecreasing), with
	// ResumeOnLastWorker every program returns to a, where it ran, as long as
	// a has headroom: p2 (a 2,500 left), p4 (100 left); p3 no longer
	// fits a and takes the most headroom (b), p5 fits a's last 100.
	c := packingSetup(t, true)
	if rep := c.Tick(t0.Add(time.Minute)); rep.Resumed != 4 {
		t.Fatalf("resumed %d: %+v", rep.Resumed, rep.Workers)
	}
	want := map[string]string{"p2": "a", "p4": "a", "p3": "b", "p5": "a"}
	for s, w := range want {
		if got := prog(t, c, s).Worker; got != w {
			t.Errorf("%s on %q, want %s", s, got, w)
		}
	}
}

func TestResumeOversized(t *testing.T) {
	// A 9,600-token program on 10,000-token workers never fits below the
	// 8,500 resume ceiling: ThunderAgent leaves it paused until the forced
	// resume; ResumeOversized resumes it onto the worker with the room of a
	// pause target (8,000), and never onto a worker without it.
	for _, oversized := range []bool{false, true} {
		c := newCtl(t, func(cfg *Config) { cfg.BufferPerProgram = 0; cfg.ResumeOversized = oversized })
		c.SetWorker("a", Capacity{Tokens: 10_000})
		c.SetWorker("b", Capacity{Tokens: 10_000})
		acting(t, c, t0, "big", 9_600, "a")
		start(t, c, t0, "holdA", 1_000, "a")
		start(t, c, t0, "holdB", 3_000, "b")
		if rep := c.Tick(t0); rep.Paused != 1 {
			t.Fatalf("setup: %+v", rep.Workers)
		}
		// a: 8,500 − 1,000 = 7,500 of headroom, b: 5,500: neither has 8,000.
		if rep := c.Tick(t0.Add(time.Minute)); rep.Resumed != 0 {
			t.Fatalf("oversized=%v: resumed without a pause target of room", oversized)
		}
		c.Finish(t0.Add(time.Minute), key("holdA"), 1_000, 0, nil) // ACTING decays: a has 8,500
		rep := c.Tick(t0.Add(2 * time.Minute))
		if got := prog(t, c, "big"); oversized != (got.Lifecycle == Active) || (oversized && got.Worker != "a") {
			t.Fatalf("oversized=%v: big is %v on %q (%+v)", oversized, got.Lifecycle, got.Worker, rep.Workers)
		}
	}
}

func TestCountedTokens(t *testing.T) {
	for _, tt := range []struct {
		tiers int
		want  int64
	}{{0, 111}, {1, 1}, {2, 11}, {3, 111}, {4, 111}} {
		c := Config{CapacityTiers: tt.tiers}
		if got := c.CountedTokens(1, 10, 100); got != tt.want {
			t.Errorf("tiers %d: %d, want %d", tt.tiers, got, tt.want)
		}
	}
}

// The resume step's slots are the programs a worker takes below the resume
// ceiling: with Switchyard's defaults (a ceiling of 0.85 − 0.05, which is
// 0.7999999999999999 in binary) a worker of 5 takes 4, not the 3 a bare
// truncation of 5 × 0.7999999999999999 gives. (The cold lane is off, so
// that a paused program's turn waits for a slot instead of running cold.)
func TestResumeSlotsAtTheCeiling(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { *cfg = DefaultConfig(); cfg.ColdLane = 0 })
	c.SetWorker("a", Capacity{MaxPrograms: 5})
	for _, s := range []string{"p1", "p2", "p3", "p4", "p5"} {
		start(t, c, t0, s, 100, "a")
	}
	if rep := c.Tick(t0); rep.Marked != 1 { // 5 REASONING > 4.25: one to pause at its boundary
		t.Fatalf("marked %d, want 1", rep.Marked)
	}
	var marked, other string
	for _, s := range []string{"p1", "p2", "p3", "p4", "p5"} {
		switch p := prog(t, c, s); {
		case p.MarkedForPause && marked == "":
			marked = s
		case !p.MarkedForPause && other == "":
			other = s
		}
	}
	c.Finish(t0, key(marked), 100, 10, nil) // pauses at the boundary
	if p := prog(t, c, marked); p.Lifecycle != Paused {
		t.Fatalf("%s is %v after its boundary, want paused", marked, p.Lifecycle)
	}
	if a := c.Admit(t0, Turn{Key: key(marked), PromptTokens: 120}, nil); a.Verdict != Wait {
		t.Fatalf("the paused program's turn: %v, want wait", a.Verdict)
	}
	c.Finish(t0, key(other), 100, 10, nil) // 3 REASONING left: room for one below 4
	if rep := c.Tick(t0.Add(time.Second)); rep.Resumed != 1 {
		t.Fatalf("resumed %d with 3 of 5 slots taken, want 1", rep.Resumed)
	}
}

// A first turn given up before it ran (the engine refused its prompt, too
// long for it) takes its program with it: left, it would hold that
// prompt's tokens against the worker until the idle TTL. A program that
// completed a turn, or has another turn waiting or in flight, stays.
func TestCancelledFirstTurnReleasesItsProgram(t *testing.T) {
	c := newCtl(t, nil)
	start(t, c, t0, "huge", 900_000, "a")
	if evs := c.Cancel(t0, key("huge")); len(evs) != 1 || evs[0].Reason != ReasonReleased {
		t.Fatalf("the refused first turn's cancel: %+v", evs)
	}
	if p, ok := c.Get(key("huge")); ok && p.Lifecycle != Terminated {
		t.Fatalf("the never-run program is still %v with %d tokens", p.Lifecycle, p.TokenTotal)
	}
	if u := c.Utilization(t0); len(u) > 0 && u[0].Utilization > 0 {
		t.Fatalf("the worker still counts it: %+v", u)
	}

	acting(t, c, t0, "ran", 500, "a")
	start(t, c, t0, "ran", 900_000, "a")
	if evs := c.Cancel(t0, key("ran")); len(evs) == 0 || evs[0].Reason == ReasonReleased {
		t.Fatalf("a program that completed a turn was released by a cancel: %+v", evs)
	}
	if p := prog(t, c, "ran"); p.Lifecycle != Active {
		t.Fatalf("the program that ran: %v", p.Lifecycle)
	}

	start(t, c, t0, "two", 500, "a")
	start(t, c, t0, "two", 500, "a") // a second request of the session, beside it
	if evs := c.Cancel(t0, key("two")); len(evs) != 0 {
		t.Fatalf("a cancel with another turn in flight: %+v", evs)
	}
	if p := prog(t, c, "two"); p.Lifecycle != Active || p.InFlight != 1 {
		t.Fatalf("the program with a turn in flight: %v, %d in flight", p.Lifecycle, p.InFlight)
	}
}

// TestRetriedFinalTurnIsNotANewSession: a final turn whose deadline passed
// while it waited keeps its program (the frontend answers "retry shortly"),
// so its retry is a returning program's turn, never shed as a new session.
func TestRetriedFinalTurnIsNotANewSession(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ShedBacklog = 0.2 })
	if rep := shrunk(t, c, 3_000, "p1", "p2", "p3", "p4"); rep.Paused < 2 {
		t.Fatalf("paused %d, want 2 or more", rep.Paused)
	}
	turn := Turn{Key: key(c.List(Filter{Lifecycle: Paused})[0].Key.SessionID), PromptTokens: 3_000, Final: true}
	w := c.Admit(t0.Add(2*time.Second), turn, nil)
	if w.Verdict != Wait {
		t.Fatalf("verdict %v, want wait", w.Verdict)
	}
	c.Abandon(t0.Add(32*time.Second), w.Waiter, false) // the route timeout
	if retry := c.Admit(t0.Add(33*time.Second), turn, nil); retry.Verdict == Shed {
		t.Error("the retried last turn of a running session was shed as a new session")
	}
}

// TestAbandonTouchesOnlyItsOwnProgram: a final turn's waiter abandoned after
// its session id was taken up by a new program releases nothing of it.
func TestAbandonTouchesOnlyItsOwnProgram(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ColdLane = 0 })
	shrunk(t, c, 4_000, "s", "x", "y", "z")
	if prog(t, c, "s").Lifecycle != Paused {
		t.Fatal("s not paused: the test would prove nothing")
	}
	w := c.Admit(t0.Add(2*time.Second), Turn{Key: key("s"), PromptTokens: 4_000, Final: true}, nil)
	if w.Verdict != Wait {
		t.Fatalf("verdict %v, want wait", w.Verdict)
	}
	c.Release(t0.Add(3*time.Second), key("s")) // the session ended: wakes w
	c.SetWorker("a", Capacity{Tokens: 100_000})
	c.Tick(t0.Add(3500 * time.Millisecond))
	start(t, c, t0.Add(4*time.Second), "s", 1_000, "a") // a new session under the id
	c.Finish(t0.Add(5*time.Second), key("s"), 1_000, 10, nil)
	c.Abandon(t0.Add(6*time.Second), w.Waiter, true) // the old turn's client leaves only now
	if got := prog(t, c, "s"); got.Lifecycle == Terminated {
		t.Fatalf("the new session's program (step %d) was released by the old one's abandoned turn", got.StepCount)
	}
}

// shrunk runs sessions on worker a, each acting with tokens, then halves
// the worker's 20,000 tokens and ticks, pausing what no longer fits.
func shrunk(t *testing.T, c *Controller, tokens int64, sessions ...string) TickReport {
	t.Helper()
	c.SetWorker("a", Capacity{Tokens: 20_000})
	for _, s := range sessions {
		acting(t, c, t0, s, tokens, "a")
	}
	c.SetWorker("a", Capacity{Tokens: 10_000})
	return c.Tick(t0.Add(time.Second))
}
