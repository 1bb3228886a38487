package admission

import (
	"testing"
	"time"
)

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
	select {
	case <-a2.Waiter.Ready():
	default:
		t.Fatal("not woken")
	}
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
	select {
	case <-a1.Waiter.Ready():
	default:
		t.Fatal("n#1 not woken")
	}
	c.Abandon(now.Add(3*time.Second), a2.Waiter)
	b := c.Admit(now.Add(4*time.Second), Turn{RequestID: "n#1", Key: key("n"), PromptTokens: 1_000}, a1.Waiter)
	if after := prog(t, c, "n").Seq; after != before {
		t.Errorf("claimed sibling ran as program %d, want %d (verdict %v cold %v)", after, before, b.Verdict, b.Cold)
	}
}
