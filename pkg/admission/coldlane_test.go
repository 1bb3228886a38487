package admission

import (
	"testing"
	"time"
)

// pausedPair sets up one worker holding "resident" and two paused programs,
// "p1" and "p2", each with a finished turn (ACTING, PAUSED).
func pausedPair(t *testing.T, mod func(*Config)) *Controller {
	t.Helper()
	c := newCtl(t, func(cfg *Config) {
		cfg.ColdLane, cfg.ResidentRetention = 1, 5*time.Minute
		cfg.ActingTokenWeight, cfg.PauseOrder = 1, PauseSmallest
		if mod != nil {
			mod(cfg)
		}
	})
	c.SetWorker("a", Capacity{Tokens: 20_000}) // room for all three
	acting(t, c, t0, "resident", 5_000, "a")
	acting(t, c, t0, "p1", 4_000, "a")
	acting(t, c, t0, "p2", 4_000, "a")
	c.SetWorker("a", Capacity{Tokens: 10_000})
	c.Tick(t0.Add(time.Second)) // over 0.95: pauses the smallest down to 0.80
	if prog(t, c, "p1").Lifecycle != Paused || prog(t, c, "p2").Lifecycle != Paused {
		t.Fatalf("setup: p1 %v, p2 %v, want both paused", prog(t, c, "p1").Lifecycle, prog(t, c, "p2").Lifecycle)
	}
	return c
}

// A paused program's turn runs cold while a slot is free, stays PAUSED,
// carries no retention and goes behind resident turns; the next waits, and
// the slot freed by the first goes to it.
func TestColdLaneRunsPausedTurnsWithoutResuming(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	a1 := c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil)
	if a1.Verdict != Run || !a1.Cold || a1.Worker != "a" || a1.Retain != 0 || a1.PriorityJump >= 0 {
		t.Fatalf("p1's turn: %+v, want run cold on a, unretained, behind (negative jump)", a1)
	}
	if p := prog(t, c, "p1"); p.Lifecycle != Paused || p.Phase != Reasoning {
		t.Fatalf("p1 is %v/%v, want PAUSED and REASONING", p.Lifecycle, p.Phase)
	}
	a2 := c.Admit(now.Add(time.Second), Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, nil)
	if a2.Verdict != Wait {
		t.Fatalf("p2's turn with the lane full: %v, want wait", a2.Verdict)
	}
	r := c.Admit(now.Add(time.Second), Turn{Key: key("resident"), PromptTokens: 5_100}, nil)
	if r.Verdict != Run || r.Cold || r.Retain != 5*time.Minute {
		t.Fatalf("resident's turn: %+v, want run, not cold, retained 5m", r)
	}
	c.EndCold("p1#1")
	c.Finish(now.Add(5*time.Second), key("p1"), 4_100, 50, nil)
	mustBeWoken(t, a2.Waiter, "p1's cold turn ended but p2's waiting turn was not woken")
	a2 = c.Admit(now.Add(5*time.Second), Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, a2.Waiter)
	if a2.Verdict != Run || !a2.Cold {
		t.Fatalf("p2 after the slot freed: %+v, want run cold", a2)
	}
}

// Without the lane (ThunderAgent) a paused program's turn waits.
func TestNoColdLaneWaits(t *testing.T) {
	c := pausedPair(t, func(cfg *Config) { cfg.ColdLane = 0 })
	if a := c.Admit(t0.Add(2*time.Second), Turn{Key: key("p1"), PromptTokens: 4_100}, nil); a.Verdict != Wait {
		t.Fatalf("verdict %v, want wait", a.Verdict)
	}
}

// A freed slot goes to the turn that waited longest, not to one arriving
// after it: a newcomer never overtakes a waiting turn.
func TestColdSlotGoesToTheOldestWaiter(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	if a := c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil); !a.Cold {
		t.Fatalf("p1: %+v, want cold", a)
	}
	w2 := c.Admit(now.Add(time.Second), Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, nil)
	if w2.Verdict != Wait {
		t.Fatalf("p2: %v, want wait", w2.Verdict)
	}
	c.EndCold("p1#1")
	c.Finish(now.Add(3*time.Second), key("p1"), 4_100, 50, nil)
	// A new session arriving after p2's turn, before p2 comes back for the
	// slot, waits.
	if a := c.Admit(now.Add(3*time.Second), Turn{Key: key("new"), PromptTokens: 10}, nil); a.Verdict != Wait {
		t.Fatalf("a new session overtook p2: %+v", a)
	}
	if a := c.Admit(now.Add(4*time.Second), Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, w2.Waiter); !a.Cold {
		t.Fatalf("p2 back for its slot: %+v, want cold", a)
	}
}

// A cold turn's slot is the turn's: freed when that turn ends (finished or
// cancelled), whatever its program does meanwhile — a program released and
// replaced under its key while its cold turn runs frees nothing early, so
// the lane never holds more cold turns than it has slots.
func TestColdSlotsFollowTheTurn(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	held := func(what string, want int) {
		t.Helper()
		if got := c.workers["a"].cold; got != want {
			t.Fatalf("%s: %d cold slots held, want %d", what, got, want)
		}
	}
	if a := c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil); !a.Cold {
		t.Fatalf("p1: %+v, want cold", a)
	}
	c.EndCold("p1#1")
	c.Cancel(now, key("p1"))
	held("cancelled", 0)
	c.Admit(now, Turn{RequestID: "p1#2", Key: key("p1"), PromptTokens: 4_100}, nil)
	if _, err := c.Release(now, key("p1")); err != nil {
		t.Fatal(err)
	}
	// A new program under p1's key, while p1#2 still runs cold: the slot
	// is still p1#2's, so the newcomer waits.
	if a := c.Admit(now.Add(time.Second), Turn{RequestID: "p1#3", Key: key("p1"), PromptTokens: 10}, nil); a.Cold {
		t.Fatalf("a replacement under p1's key took the slot p1#2 still holds: %+v", a)
	}
	held("released, replaced, still running", 1)
	c.EndCold("p1#2")
	c.EndCold("p1#2") // a repeated finish frees nothing more
	held("the old turn finished", 0)
}

// A worker that joins brings free slots: the tick hands them to the turns
// waiting for one.
func TestNewWorkerSlotsWakeTheWaiting(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil) // cold on a
	w := c.Admit(now, Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, nil)
	if w.Verdict != Wait {
		t.Fatalf("p2: %v, want wait", w.Verdict)
	}
	c.SetWorker("b", Capacity{Tokens: 10_000})
	c.Tick(now.Add(time.Second))
	mustBeWoken(t, w.Waiter, "a worker joined with a free cold slot, and p2's waiting turn was not woken")
}

// The worker of a turn woken for a slot is decided when the slot is held
// for it, in the order the turns waited: several woken at once take the
// same workers whichever asks again first (live, they race for the lock;
// replay asks in order).
func TestWokenTurnsTakeTheSlotsHeldForThem(t *testing.T) {
	for _, reversed := range []bool{false, true} {
		c := pausedPair(t, nil)
		c.SetWorker("b", Capacity{Tokens: 1})
		now := t0.Add(2 * time.Second)
		if a := c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil); a.Worker != "a" || !a.Cold {
			t.Fatalf("p1: %+v, want cold on a, its last worker", a)
		}
		if a := c.Admit(now, Turn{RequestID: "x#1", Key: key("x"), PromptTokens: 10}, nil); a.Worker != "b" || !a.Cold {
			t.Fatalf("x: %+v, want cold on b, the one free", a)
		}
		w2 := c.Admit(now, Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, nil)
		w3 := c.Admit(now.Add(time.Second), Turn{RequestID: "new#1", Key: key("new"), PromptTokens: 10}, nil)
		if w2.Verdict != Wait || w3.Verdict != Wait {
			t.Fatalf("p2 %v, new %v: want both waiting", w2.Verdict, w3.Verdict)
		}
		c.EndCold("p1#1") // a's slot: held for p2, the older, whose last worker is a
		c.EndCold("x#1")  // b's: held for the newcomer
		turns := []struct {
			id, key string
			w       *Waiter
			want    string
		}{{"p2#1", "p2", w2.Waiter, "a"}, {"new#1", "new", w3.Waiter, "b"}}
		if reversed {
			turns[0], turns[1] = turns[1], turns[0]
		}
		for _, tu := range turns {
			a := c.Admit(now.Add(2*time.Second), Turn{RequestID: tu.id, Key: key(tu.key), PromptTokens: 10}, tu.w)
			if a.Verdict != Run || !a.Cold || a.Worker != tu.want {
				t.Fatalf("reversed %v: %s came back for its slot: verdict %v cold %v worker %q, want cold on %s", reversed, tu.key, a.Verdict, a.Cold, a.Worker, tu.want)
			}
		}
	}
}

// A woken turn takes the slot held for it even when its last worker frees
// meanwhile (the rule that keeps turns woken together from depending on
// their order), and a slot held on a worker that leaves is still held: a
// newcomer does not take the fleet's last open slot from the woken turn.
func TestHeldSlotsOutliveTheirWorker(t *testing.T) {
	setup := func() (*Controller, *Waiter) {
		c := pausedPair(t, nil)
		c.SetWorker("b", Capacity{Tokens: 1})
		now := t0.Add(2 * time.Second)
		c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil) // cold on a
		c.Admit(now, Turn{RequestID: "x#1", Key: key("x"), PromptTokens: 10}, nil)      // cold on b
		w2 := c.Admit(now, Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, nil)
		if w2.Verdict != Wait {
			t.Fatalf("p2: %v, want wait", w2.Verdict)
		}
		c.EndCold("x#1") // b's slot, held for p2 (a, its last worker, is busy)
		return c, w2.Waiter
	}
	now := t0.Add(3 * time.Second)

	c, w2 := setup()
	c.EndCold("p1#1") // a frees too, and nobody else waits
	if a := c.Admit(now, Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, w2); !a.Cold || a.Worker != "b" {
		t.Fatalf("p2 back for its slot after its last worker freed: cold %v on %q, want the one held on b", a.Cold, a.Worker)
	}

	c, w2 = setup()
	c.RemoveWorker(now, "b")
	c.EndCold("p1#1") // a's slot: the only open one, still p2's
	if a := c.Admit(now, Turn{RequestID: "new#1", Key: key("new"), PromptTokens: 10}, nil); a.Verdict != Wait {
		t.Fatalf("a newcomer took the slot held for p2 after p2's worker left: %+v", a)
	}
	if a := c.Admit(now, Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, w2); !a.Cold || a.Worker != "a" {
		t.Fatalf("p2 back after its held slot's worker left: cold %v on %q, want cold on a", a.Cold, a.Worker)
	}
}

// A turn woken for a slot that gives up passes the slot on; a new
// program whose only turn gave up so is released, not left PAUSED.
func TestAbandonedClaimPassesTheSlot(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil) // cold
	wNew := c.Admit(now, Turn{RequestID: "new#1", Key: key("new"), PromptTokens: 10}, nil)
	w2 := c.Admit(now.Add(time.Second), Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, nil)
	if wNew.Verdict != Wait || w2.Verdict != Wait {
		t.Fatalf("new %v, p2 %v: want both waiting", wNew.Verdict, w2.Verdict)
	}
	c.EndCold("p1#1") // the slot goes to "new", the oldest waiter
	c.Abandon(now.Add(2*time.Second), wNew.Waiter, true)
	mustBeWoken(t, w2.Waiter, "the abandoned claim was not passed on to p2")
	if p, ok := c.Get(key("new")); ok && p.Lifecycle != Terminated {
		t.Fatalf("new, whose only turn gave up, is %v, want released", p.Lifecycle)
	}
}

// The first turn of a program admitted straight to ACTIVE is retained like
// every later one; a final turn is not (its session is over).
func TestResidentRetention(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ResidentRetention = time.Minute })
	c.SetWorker("a", Capacity{Tokens: 10_000})
	if a := c.Admit(t0, Turn{RequestID: "s#1", Key: key("s"), PromptTokens: 100}, nil); a.Retain != time.Minute {
		t.Fatalf("first turn: retain %v, want 1m", a.Retain)
	}
	c.Placed(t0, key("s"), "a")
	c.Finish(t0, key("s"), 100, 1, nil)
	if a := c.Admit(t0, Turn{RequestID: "s#2", Key: key("s"), PromptTokens: 200}, nil); a.Retain != time.Minute {
		t.Fatalf("second turn: retain %v, want 1m", a.Retain)
	}
	c.Finish(t0, key("s"), 200, 1, nil)
	if a := c.Admit(t0, Turn{RequestID: "s#3", Key: key("s"), PromptTokens: 300, Final: true}, nil); a.Retain != 0 {
		t.Fatalf("final turn: retain %v, want none", a.Retain)
	}
}

// While turns wait, the tick pauses ACTING programs away past RotateAfter;
// with none waiting, or a program back sooner, it pauses nothing.
func TestRotateAfter(t *testing.T) {
	c := pausedPair(t, func(cfg *Config) {
		// Idle programs counted whole when resuming: the paused stay paused.
		cfg.RotateAfter, cfg.ActingDecayTau = time.Minute, 0
	})
	rotated := func(rep TickReport) bool {
		for _, e := range rep.Events {
			if e.Reason == ReasonRotated {
				return true
			}
		}
		return false
	}
	if rep := c.Tick(t0.Add(2 * time.Minute)); rotated(rep) {
		t.Fatalf("nothing waiting, yet the tick rotated: %+v", rep)
	}
	now := t0.Add(2 * time.Minute)
	c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil) // cold
	if a := c.Admit(now, Turn{RequestID: "p2#1", Key: key("p2"), PromptTokens: 4_100}, nil); a.Verdict != Wait {
		t.Fatalf("p2: %v, want wait", a.Verdict)
	}
	rep := c.Tick(now.Add(time.Second))
	if !rotated(rep) || prog(t, c, "resident").Lifecycle != Paused {
		t.Fatalf("resident, away 2 min with a turn waiting, is %v (tick %+v), want paused", prog(t, c, "resident").Lifecycle, rep)
	}
}

// With the resume ceiling at the pause target and a buffer per program, an
// oversized program still fits an empty worker: its cap stays under the
// ceiling, buffer included (it used to wait for the forced resume).
func TestOversizedResumesUnderACeilingAtTheTarget(t *testing.T) {
	c := newCtl(t, func(cfg *Config) {
		cfg.ResumeOversized = true
		cfg.PauseThreshold, cfg.PauseTarget, cfg.ResumeHysteresis, cfg.SoftDemoteThreshold = 0.75, 0.70, 0.05, 0.70
	})
	c.SetWorker("a", Capacity{Tokens: 20_000})
	acting(t, c, t0, "big", 9_600, "a")
	c.SetWorker("a", Capacity{Tokens: 10_000}) // 9,700 > 7,500: paused
	c.Tick(t0.Add(time.Second))
	if prog(t, c, "big").Lifecycle != Paused {
		t.Fatal("setup: big not paused")
	}
	c.Tick(t0.Add(time.Minute))
	if p := prog(t, c, "big"); p.Lifecycle != Active || p.Worker != "a" {
		t.Fatalf("big, alone and oversized, is %v on %q, want resumed on a", p.Lifecycle, p.Worker)
	}
}

// ResumeDensest resumes first the program with the fewest KV-seconds per
// turn: a larger one with short gaps before a smaller one with long gaps
// (smallest first would take the other).
func TestResumeDensest(t *testing.T) {
	var o ResumeOrder
	if err := o.Set("densest"); err != nil || o != ResumeDensest {
		t.Fatalf("parse densest: %v %v", o, err)
	}
	c := newCtl(t, func(cfg *Config) { cfg.ResumeOrder, cfg.IdleTTL = ResumeDensest, 0 })
	c.SetWorker("a", Capacity{Tokens: 20_000})
	// Teach the gaps: sparse comes back after 9 minutes, dense after 2 s.
	now := t0
	for _, tc := range []struct {
		s      string
		tokens int64
		gap    time.Duration
	}{{"sparse", 3_000, 9 * time.Minute}, {"dense", 4_000, 2 * time.Second}} {
		for range 4 {
			start(t, c, now, tc.s, tc.tokens, "a")
			c.Finish(now, key(tc.s), tc.tokens, 0, nil)
			now = now.Add(tc.gap)
		}
	}
	c.SetWorker("a", Capacity{Tokens: 5_000}) // room for one of them
	c.Tick(now)
	for _, s := range []string{"sparse", "dense"} {
		if prog(t, c, s).Lifecycle != Paused {
			c.update(c.get(key(s).id()), func(p *Program) { c.pause(p, now) })
		}
	}
	c.commit()
	c.Tick(now.Add(time.Minute))
	if d, s := prog(t, c, "dense"), prog(t, c, "sparse"); d.Lifecycle != Active || s.Lifecycle != Paused {
		t.Fatalf("dense %v, sparse %v: want dense resumed first", d.Lifecycle, s.Lifecycle)
	}
}

// TestColdSlotSiblingKeepsItsProgramOnCancel: a new program's cold first
// turn ends and passes its slot to a waiting sibling; the first turn's
// cancel must not release the program under the woken sibling, which would
// then run as a new program.
func TestColdSlotSiblingKeepsItsProgramOnCancel(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	a1 := c.Admit(now, Turn{RequestID: "n#1", Key: key("n"), PromptTokens: 1_000}, nil)
	if a1.Verdict != Run || !a1.Cold {
		t.Fatalf("n#1: %+v", a1)
	}
	a2 := c.Admit(now.Add(time.Second), Turn{RequestID: "n#2", Key: key("n"), PromptTokens: 1_000}, nil)
	if a2.Verdict != Wait {
		t.Fatalf("n#2: %+v", a2.Verdict)
	}
	before := prog(t, c, "n").Seq
	c.EndCold("n#1")
	mustBeWoken(t, a2.Waiter, "not woken")
	c.Cancel(now.Add(2*time.Second), key("n"))
	b := c.Admit(now.Add(3*time.Second), Turn{RequestID: "n#2", Key: key("n"), PromptTokens: 1_000}, a2.Waiter)
	after := prog(t, c, "n").Seq
	if after != before {
		t.Errorf("sibling woken for a cold slot ran as program %d, want %d (verdict %v)", after, before, b.Verdict)
	}
}

// TestColdSlotSiblingKeepsItsProgramOnAbandon: likewise when a turn
// abandons while a sibling woken for a cold slot is still to come back.
func TestColdSlotSiblingKeepsItsProgramOnAbandon(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	if a := c.Admit(now, Turn{RequestID: "p1#1", Key: key("p1"), PromptTokens: 4_100}, nil); !a.Cold {
		t.Fatalf("p1: %+v", a)
	}
	a1 := c.Admit(now.Add(time.Second), Turn{RequestID: "n#1", Key: key("n"), PromptTokens: 1_000}, nil)
	a2 := c.Admit(now.Add(2*time.Second), Turn{RequestID: "n#2", Key: key("n"), PromptTokens: 1_000}, nil)
	if a1.Verdict != Wait || a2.Verdict != Wait {
		t.Fatalf("%v %v", a1.Verdict, a2.Verdict)
	}
	before := prog(t, c, "n").Seq
	c.EndCold("p1#1")
	mustBeWoken(t, a1.Waiter, "n#1 not woken")
	c.Abandon(now.Add(3*time.Second), a2.Waiter, true)
	b := c.Admit(now.Add(4*time.Second), Turn{RequestID: "n#1", Key: key("n"), PromptTokens: 1_000}, a1.Waiter)
	if after := prog(t, c, "n").Seq; after != before {
		t.Errorf("claimed sibling ran as program %d, want %d (verdict %v cold %v)", after, before, b.Verdict, b.Cold)
	}
}

// mustBeWoken fails the test unless w was woken: told to come back and be
// admitted again.
func mustBeWoken(t *testing.T, w *Waiter, why string) {
	t.Helper()
	select {
	case <-w.Ready():
	default:
		t.Fatal(why)
	}
}
