package admission

import (
	"testing"
	"time"
)

// TestLatestReturnPausesTheProgramAwayLongest: with the same sizes, the
// smallest-first order pauses by arrival, latest-return pauses the program
// whose tool gaps say it will be away longest.
func TestLatestReturnPausesTheProgramAwayLongest(t *testing.T) {
	for _, tc := range []struct {
		order PauseOrder
		want  string
	}{
		{PauseSmallest, "quick"}, // equal sizes: the earlier arrival
		{PauseLatestReturn, "slow"},
	} {
		c := newCtl(t, func(cfg *Config) { cfg.PauseOrder = tc.order })
		c.SetWorker("a", Capacity{Tokens: 10_000})
		// Teach the gap model: quick returns in 1 s, slow in 10 min.
		for i := range 3 {
			now := t0.Add(time.Duration(i) * time.Hour)
			acting(t, c, now, "quick", 100, "a")
			start(t, c, now.Add(time.Second), "quick", 100, "a")
			c.Finish(now.Add(time.Second), key("quick"), 100, 0, []string{"Read"})
			acting(t, c, now, "slow", 100, "a")
			start(t, c, now.Add(10*time.Minute), "slow", 100, "a")
			c.Finish(now.Add(10*time.Minute), key("slow"), 100, 0, []string{"Bash"})
		}
		now := t0.Add(10 * time.Hour)
		acting(t, c, now, "quick", 4700, "a")
		acting(t, c, now, "slow", 4700, "a")
		rep := c.Tick(now.Add(time.Second))
		if rep.Paused != 1 {
			t.Fatalf("%v: paused %d, want 1", tc.order, rep.Paused)
		}
		if got := prog(t, c, tc.want); got.Lifecycle != Paused {
			t.Fatalf("%v: %s is %v, want it paused", tc.order, tc.want, got.Lifecycle)
		}
	}
}

// TestMaxWaitResumesOnTheLastWorker: a waiting turn is resumed once it
// has waited MaxWait, on its last worker, whatever the room; without the
// bound it waits for ResumeTimeout.
func TestMaxWaitResumesOnTheLastWorker(t *testing.T) {
	for _, bound := range []time.Duration{0, 20 * time.Second} {
		c := newCtl(t, func(cfg *Config) { cfg.MaxWait = bound })
		c.SetWorker("a", Capacity{Tokens: 10_000})
		c.SetWorker("b", Capacity{Tokens: 10_000})
		// Fillers mid-generation hold both workers; the idle programs beside
		// them take each worker over its threshold and are paused.
		start(t, c, t0, "filler-a", 8_000, "a")
		start(t, c, t0, "filler-b", 8_000, "b")
		acting(t, c, t0, "big", 1_500, "a")
		acting(t, c, t0, "other", 1_500, "b")
		c.Tick(t0.Add(time.Second))
		if prog(t, c, "big").Lifecycle != Paused {
			t.Fatal("big not paused")
		}
		a := c.Admit(t0.Add(3*time.Second), Turn{Key: key("big"), PromptTokens: 1_600}, nil)
		if a.Verdict != Wait {
			t.Fatalf("verdict %v, want wait", a.Verdict)
		}
		rep := c.Tick(t0.Add(30 * time.Second))
		resumed := prog(t, c, "big").Lifecycle == Active
		if bound == 0 {
			if resumed || rep.ForcedResumed != 0 {
				t.Fatal("resumed without a bound")
			}
			continue
		}
		if !resumed || prog(t, c, "big").Worker != "a" {
			t.Fatalf("bound %v: big is %+v, want resumed on its last worker a", bound, prog(t, c, "big"))
		}
		mustBeWoken(t, a.Waiter, "the waiting turn was not woken")
		var reason string
		for _, ev := range rep.Events {
			if ev.Program.Key == key("big") {
				reason = ev.Reason
			}
		}
		if reason != ReasonWaitBound {
			t.Fatalf("reason %q, want %q", reason, ReasonWaitBound)
		}
	}
}

// TestReadmitOnGrowth: a turn whose prompt grows past its worker's
// headroom pauses its program; the first turn after a resume and a program
// alone on its worker do not.
func TestReadmitOnGrowth(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ReadmitOnGrowth = true })
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "grows", 2_000, "a")
	acting(t, c, t0, "other", 4_000, "a")
	if a := c.Admit(t0.Add(time.Second), Turn{Key: key("grows"), PromptTokens: 3_000}, nil); a.Verdict != Run {
		t.Fatalf("small growth: %v", a.Verdict)
	}
	c.Finish(t0.Add(2*time.Second), key("grows"), 3_000, 0, nil)
	a := c.Admit(t0.Add(3*time.Second), Turn{Key: key("grows"), PromptTokens: 7_000}, nil)
	if a.Verdict != Wait || prog(t, c, "grows").Lifecycle != Paused || prog(t, c, "grows").TokenTotal != 7_000 {
		t.Fatalf("growth past the headroom: %v, %+v", a.Verdict, prog(t, c, "grows"))
	}
	alone := newCtl(t, func(cfg *Config) { cfg.ReadmitOnGrowth = true })
	alone.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, alone, t0, "solo", 2_000, "a")
	if a := alone.Admit(t0.Add(time.Second), Turn{Key: key("solo"), PromptTokens: 9_900}, nil); a.Verdict != Run {
		t.Fatalf("a program alone on its worker: %v", a.Verdict)
	}
}

// shedding is one worker, over, with one of its two programs paused: more
// than ShedBacklog (0.4) fleets' worth, so new sessions are shed. It returns
// the paused program's session.
func shedding(t *testing.T, mod func(*Config)) (*Controller, string) {
	t.Helper()
	c := newCtl(t, func(cfg *Config) {
		cfg.ShedBacklog = 0.4
		if mod != nil {
			mod(cfg)
		}
	})
	c.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, c, t0, "p1", 5_000, "a")
	acting(t, c, t0, "p2", 4_000, "a")
	start(t, c, t0, "p2", 4_500, "a") // p2 grows: the worker is over
	c.Finish(t0, key("p2"), 4_500, 0, nil)
	if rep := c.Tick(t0.Add(time.Second)); rep.Paused != 1 {
		t.Fatalf("paused %d, want 1", rep.Paused)
	}
	var paused string
	for _, p := range c.List(Filter{Lifecycle: Paused}) {
		paused = p.Key.SessionID
	}
	return c, paused
}

// TestShedNewSessionsWhileAFleetIsPaused: a new session is turned away
// while the paused programs hold more than ShedBacklog fleets; returning
// programs are not.
func TestShedNewSessionsWhileAFleetIsPaused(t *testing.T) {
	c, paused := shedding(t, func(cfg *Config) { cfg.ShedRetryAfter = 7 * time.Second })
	if a := c.Admit(t0.Add(2*time.Second), Turn{Key: key("new"), PromptTokens: 100}, nil); a.Verdict != Shed || a.RetryAfter != 7*time.Second {
		t.Fatalf("new session with %d paused: %v after %v", c.pausedTokens, a.Verdict, a.RetryAfter)
	}
	if _, ok := c.Get(key("new")); ok {
		t.Fatal("a shed session left a program behind")
	}
	if a := c.Admit(t0.Add(2*time.Second), Turn{Key: key(paused), PromptTokens: 100}, nil); a.Verdict != Wait {
		t.Fatalf("a paused program's turn: %v, want wait", a.Verdict)
	}
	off := newCtl(t, nil)
	off.SetWorker("a", Capacity{Tokens: 10_000})
	acting(t, off, t0, "p1", 9_900, "a")
	off.Tick(t0.Add(time.Second))
	if a := off.Admit(t0.Add(2*time.Second), Turn{Key: key("new"), PromptTokens: 100}, nil); a.Verdict == Shed {
		t.Fatal("shed with shedding off")
	}
}

// TestCancelIsNoStep: a cancelled turn frees its in-flight slot and leaves
// the program ACTING, without a step, a working-set change or a gap sample
// — a new program whose only turn was cancelled is still new, and is
// released when its waiting turn gives up.
func TestCancelIsNoStep(t *testing.T) {
	c := newCtl(t, nil)
	c.SetWorker("a", Capacity{Tokens: 10_000})
	start(t, c, t0, "s", 2_000, "a")
	c.Cancel(t0.Add(time.Second), key("s"))
	p := prog(t, c, "s")
	if p.StepCount != 0 || p.InFlight != 0 || p.Phase != Acting || p.TokenTotal != 2_000 || !p.AwaySince.IsZero() {
		t.Fatalf("after cancel: %+v", p)
	}
	start(t, c, t0.Add(2*time.Second), "s", 2_100, "a")
	c.Finish(t0.Add(3*time.Second), key("s"), 2_100, 50, nil)
	if p := prog(t, c, "s"); p.StepCount != 1 || p.TokenTotal != 2_150 {
		t.Fatalf("after a finish: %+v", p)
	}
	if c.gaps.global.n != 0 {
		t.Fatalf("the cancelled turn's retry was taken for a tool gap (%d samples)", c.gaps.global.n)
	}
}

// TestShedWeighsTheFleetUnderReplicas: a replica sheds by the fleet's
// paused working sets against the fleet's whole capacity, not by its own
// against its share: alike whichever replica owns a new session.
func TestShedWeighsTheFleetUnderReplicas(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ShedBacklog = 0.4 })
	totals := map[string]Capacity{"a": {Tokens: 20_000}}
	peerTokens, peersPaused := 0.0, 0.0
	others := func(string) Use {
		u := Use{Tokens: peerTokens, Paused: Demand{Tokens: peersPaused, Since: t0}}
		if peerTokens > 0 {
			u.Users = 1
		}
		return u
	}
	c.SetShares(totals, others, 2, 0) // the peer idle: this replica may use the worker
	acting(t, c, t0, "p1", 5_000, "a")
	acting(t, c, t0, "p2", 4_500, "a")
	peerTokens = 10_000 // the peer takes half the worker: this replica's share is over
	c.SetShares(totals, others, 2, 0)
	if rep := c.Tick(t0.Add(time.Second)); rep.Paused != 1 {
		t.Fatalf("paused %d, want 1", rep.Paused)
	}
	// About 5,000 tokens paused: more than 0.4 of this replica's share,
	// less than 0.4 of the fleet (20,000).
	if a := c.Admit(t0.Add(2*time.Second), Turn{Key: key("new"), PromptTokens: 100}, nil); a.Verdict == Shed {
		t.Fatalf("shed with %d paused tokens of a 20,000-token fleet", c.pausedTokens)
	}
	peersPaused = 4_000 // the other replica's paused programs tip the fleet over
	c.SetShares(totals, others, 2, 0)
	if a := c.Admit(t0.Add(3*time.Second), Turn{Key: key("new2"), PromptTokens: 100}, nil); a.Verdict != Shed {
		t.Fatalf("not shed with %d paused here and 4,000 at the peer: %v", c.pausedTokens, a.Verdict)
	}
}

// TestShedForgetsADepartedPeer: once the controller decides alone again
// (Unshare, as the pipeline does when the replicas drop to one), a departed
// peer's paused programs shed nothing.
func TestShedForgetsADepartedPeer(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ShedBacklog = 0.4 })
	totals := map[string]Capacity{"a": {Tokens: 10_000}}
	c.SetShares(totals, func(string) Use { return Use{Paused: Demand{Tokens: 6_000, Since: t0}} }, 2, 0)
	if !c.shedding() {
		t.Fatal("the peer's 6,000 paused tokens of a 10,000-token fleet do not shed: the test would prove nothing")
	}
	c.Unshare()
	c.SetWorker("a", Capacity{Tokens: 10_000})
	if a := c.Admit(t0.Add(time.Minute), Turn{Key: key("fresh"), PromptTokens: 100}, nil); a.Verdict == Shed {
		t.Fatal("alone, nothing paused anywhere: a new session was shed")
	}
}

// TestShedReadsThePeersDemandOnEveryWorker: a peer that has not heard of a
// worker sends no demand for it; the demand shedding weighs is the most any
// worker heard, not whichever worker a map gives first.
func TestShedReadsThePeersDemandOnEveryWorker(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ShedBacklog = 0.4 })
	totals := map[string]Capacity{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		totals[id] = Capacity{Tokens: 1_000}
	}
	others := func(w string) Use {
		if w == "h" { // the peer has not heard of h yet
			return Use{}
		}
		return Use{Paused: Demand{Tokens: 6_000, Since: t0}}
	}
	for range 50 {
		if c.SetShares(totals, others, 2, 0); !c.shedding() {
			t.Fatal("the peer's paused demand was read off the worker it has not heard of")
		}
	}
}
