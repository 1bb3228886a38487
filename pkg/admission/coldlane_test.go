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
	a1 := c.Admit(now, Turn{Key: key("p1"), PromptTokens: 4_100}, nil)
	if a1.Verdict != Run || !a1.Cold || a1.Worker != "a" || a1.Retain != 0 || a1.PriorityJump >= 0 {
		t.Fatalf("p1's turn: %+v, want run cold on a, unretained, behind (negative jump)", a1)
	}
	if p := prog(t, c, "p1"); p.Lifecycle != Paused || p.Phase != Reasoning {
		t.Fatalf("p1 is %v/%v, want PAUSED and REASONING", p.Lifecycle, p.Phase)
	}
	a2 := c.Admit(now.Add(time.Second), Turn{Key: key("p2"), PromptTokens: 4_100}, nil)
	if a2.Verdict != Wait {
		t.Fatalf("p2's turn with the lane full: %v, want wait", a2.Verdict)
	}
	r := c.Admit(now.Add(time.Second), Turn{Key: key("resident"), PromptTokens: 5_100}, nil)
	if r.Verdict != Run || r.Cold || r.Retain != 5*time.Minute {
		t.Fatalf("resident's turn: %+v, want run, not cold, retained 5m", r)
	}
	c.Finish(now.Add(5*time.Second), key("p1"), 4_100, 50, nil)
	select {
	case <-a2.Waiter.Ready():
	default:
		t.Fatal("p1's cold turn ended but p2's waiting turn was not woken")
	}
	a2 = c.Admit(now.Add(5*time.Second), Turn{Key: key("p2"), PromptTokens: 4_100}, a2.Waiter)
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
	if a := c.Admit(now, Turn{Key: key("p1"), PromptTokens: 4_100}, nil); !a.Cold {
		t.Fatalf("p1: %+v, want cold", a)
	}
	w2 := c.Admit(now.Add(time.Second), Turn{Key: key("p2"), PromptTokens: 4_100}, nil)
	if w2.Verdict != Wait {
		t.Fatalf("p2: %v, want wait", w2.Verdict)
	}
	c.Finish(now.Add(3*time.Second), key("p1"), 4_100, 50, nil)
	// A new session arriving after p2's turn, before p2 comes back for the
	// slot, waits.
	if a := c.Admit(now.Add(3*time.Second), Turn{Key: key("new"), PromptTokens: 10}, nil); a.Verdict != Wait {
		t.Fatalf("a new session overtook p2: %+v", a)
	}
	if a := c.Admit(now.Add(4*time.Second), Turn{Key: key("p2"), PromptTokens: 4_100}, w2.Waiter); !a.Cold {
		t.Fatalf("p2 back for its slot: %+v, want cold", a)
	}
}

// A cold turn's slot is freed however its program ends: a finished turn, a
// cancelled one, and a program released and replaced under the same key
// while its cold turn ran.
func TestColdSlotsAreNeverLost(t *testing.T) {
	c := pausedPair(t, nil)
	now := t0.Add(2 * time.Second)
	slot := func(what string) {
		t.Helper()
		if got := c.workers["a"].cold; got != 0 {
			t.Fatalf("%s: %d cold slots held, want 0", what, got)
		}
	}
	c.Admit(now, Turn{Key: key("p1"), PromptTokens: 4_100}, nil)
	c.Cancel(now, key("p1"))
	slot("cancelled")
	c.Admit(now, Turn{Key: key("p1"), PromptTokens: 4_100}, nil)
	if _, err := c.Release(now, key("p1")); err != nil {
		t.Fatal(err)
	}
	c.Finish(now.Add(time.Second), key("p1"), 4_100, 1, nil)
	slot("released, then finished")
	c.Admit(now, Turn{Key: key("p2"), PromptTokens: 4_100}, nil)
	c.Release(now, key("p2"))
	c.Admit(now.Add(time.Second), Turn{Key: key("p2"), PromptTokens: 10}, nil) // a new program under the key
	slot("replaced")
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
	c.Admit(now, Turn{Key: key("p1"), PromptTokens: 4_100}, nil) // cold
	if a := c.Admit(now, Turn{Key: key("p2"), PromptTokens: 4_100}, nil); a.Verdict != Wait {
		t.Fatalf("p2: %v, want wait", a.Verdict)
	}
	rep := c.Tick(now.Add(time.Second))
	if !rotated(rep) || prog(t, c, "resident").Lifecycle != Paused {
		t.Fatalf("resident, away 2 min with a turn waiting, is %v (tick %+v), want paused", prog(t, c, "resident").Lifecycle, rep)
	}
}
