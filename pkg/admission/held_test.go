package admission

import (
	"testing"
	"time"
)

// With HeldFromIndex an idle program counts what the index says it still
// holds: a worker whose engine evicted one program's KV is not over, and
// the tick pauses nobody; the same fleet counted by working sets pauses.
func TestObserveCountsWhatTheIndexHolds(t *testing.T) {
	for _, fromIndex := range []bool{false, true} {
		c := newCtl(t, func(cfg *Config) { cfg.HeldFromIndex = fromIndex; cfg.ActingDecayTau = 0 })
		c.SetWorker("w", Capacity{Tokens: 10_000})
		acting(t, c, t0, "a", 6_000, "w")
		start(t, c, t0, "b", 100, "w") // admitted small, its prompt grew
		c.Finish(t0, key("b"), 4_000, 0, nil)
		// a's prompt (6,000 tokens, 375 blocks of 16) kept only its first
		// 100 blocks on device.
		took := c.Observe(Holding{Key: key("a"), Worker: "w", Since: t0, Blocks: 375, BlockSize: 16, Tiers: []int{100}})
		if took != fromIndex {
			t.Fatalf("fromIndex %v: Observe took %v", fromIndex, took)
		}
		rep := c.Tick(t0.Add(time.Second))
		if fromIndex {
			if p := prog(t, c, "a"); p.Held != 1_600 || !p.HeldSeen {
				t.Fatalf("held %d (seen %v), want 1600", p.Held, p.HeldSeen)
			}
			if rep.Paused != 0 {
				t.Fatalf("paused %d with 5,600 of 10,000 held", rep.Paused)
			}
			continue
		}
		if rep.Paused == 0 {
			t.Fatal("working sets of 10,000 on 10,000 paused nobody")
		}
	}
}

// What the index says counts only for the turn it was asked about, on the
// worker it was asked about, in the tiers admission counts; the whole
// prompt resident means the whole working set.
func TestObserveTakesOnlyACurrentAnswer(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.HeldFromIndex = true; cfg.CapacityTiers = 1 })
	c.SetWorker("w", Capacity{Tokens: 100_000})
	acting(t, c, t0, "a", 1_000, "w")
	h := Holding{Key: key("a"), Worker: "w", Since: t0, Blocks: 50, BlockSize: 16, Tiers: []int{10, 40}}
	for name, bad := range map[string]Holding{
		"another worker":     {Key: h.Key, Worker: "x", Since: t0, Blocks: 50, BlockSize: 16, Tiers: h.Tiers},
		"an older tool call": {Key: h.Key, Worker: "w", Since: t0.Add(-time.Second), Blocks: 50, BlockSize: 16, Tiers: h.Tiers},
		"no block size":      {Key: h.Key, Worker: "w", Since: t0, Blocks: 50, Tiers: h.Tiers},
		"an unknown key":     {Key: key("z"), Worker: "w", Since: t0, Blocks: 50, BlockSize: 16, Tiers: h.Tiers},
	} {
		if c.Observe(bad) {
			t.Fatalf("%s: taken", name)
		}
	}
	if !c.Observe(h) {
		t.Fatal("a current answer was dropped")
	}
	// Only the device counts (CapacityTiers 1): 10 blocks.
	if p := prog(t, c, "a"); p.Held != 160 {
		t.Fatalf("held %d, want 160", p.Held)
	}
	if u := c.Utilization(t0)[0].Used; u != 160+float64(c.Config().BufferPerProgram) {
		t.Fatalf("worker counts %v", u)
	}
	// The whole prompt on device: the whole working set (the prompt and
	// the answer after it).
	c.Observe(Holding{Key: key("a"), Worker: "w", Since: t0, Blocks: 50, BlockSize: 16, Tiers: []int{50}})
	if p := prog(t, c, "a"); p.Held != 1_000 {
		t.Fatalf("held %d, want the working set 1000", p.Held)
	}
	// The next turn counts its prompt whole again, and so does its end
	// until the index is asked again.
	t1 := t0.Add(time.Second)
	start(t, c, t1, "a", 1_200, "w")
	if p := prog(t, c, "a"); p.HeldSeen && p.Phase == Acting {
		t.Fatal("a new turn kept the old answer")
	}
	c.Finish(t1, key("a"), 1_200, 100, nil)
	if p := prog(t, c, "a"); p.HeldSeen || c.Utilization(t1)[0].Used != 1_300+float64(c.Config().BufferPerProgram) {
		t.Fatalf("after the turn: %+v, used %v", p, c.Utilization(t1)[0].Used)
	}
	if c.Observe(h) {
		t.Fatal("an answer about the tool call before was taken")
	}
	// A turn admitted and cancelled (it never reached an engine) ends the
	// tool call too: an answer asked before it describes the prompt before.
	h.Since = t1
	t2 := t1.Add(time.Second)
	start(t, c, t2, "a", 1_500, "w")
	c.Cancel(t2, key("a"))
	if c.Observe(h) {
		t.Fatal("an answer asked before a cancelled turn was taken")
	}
}

// An answer holds only where and while it was given: a program that moves
// to another worker, or is paused, counts its whole working set again.
func TestHeldIsForgottenOnAMoveOrAPause(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.HeldFromIndex = true })
	c.SetWorker("w", Capacity{Tokens: 100_000})
	c.SetWorker("x", Capacity{Tokens: 100_000})
	acting(t, c, t0, "a", 1_600, "w")
	if !c.Observe(Holding{Key: key("a"), Worker: "w", Since: t0, Blocks: 100, BlockSize: 16, Tiers: []int{10}}) {
		t.Fatal("answer dropped")
	}
	c.Placed(t0, key("a"), "x")
	if p := prog(t, c, "a"); p.HeldSeen {
		t.Fatalf("moved to x, still counted as holding what w held: %+v", p)
	}
	if u := c.Utilization(t0)[1].Used; u != 1_600+float64(c.Config().BufferPerProgram) {
		t.Fatalf("x counts %v", u)
	}
	c.Observe(Holding{Key: key("a"), Worker: "x", Since: t0, Blocks: 100, BlockSize: 16, Tiers: []int{10}})
	c.update(c.get(key("a").id()), func(p *Program) { c.pause(p, t0) })
	if p := prog(t, c, "a"); p.HeldSeen {
		t.Fatalf("paused, still counted as holding: %+v", p)
	}
	if _, ok := (&Program{Phase: Acting, Lifecycle: Paused, HeldSeen: true}).HeldTokens(); ok {
		t.Fatal("a paused program reports what it held")
	}
}
