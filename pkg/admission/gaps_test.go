package admission

import (
	"fmt"
	"testing"
	"time"
)

func TestGapModelFallsBackFromSessionToToolToGlobal(t *testing.T) {
	g := NewGapModel(7 * time.Second)
	if got := g.Typical("s", nil); got != 7*time.Second {
		t.Fatalf("empty model: %v, want the fallback", got)
	}
	for range 5 {
		g.Observe("a", []string{"Bash"}, 100*time.Second)
		g.Observe("b", []string{"Read"}, time.Second)
	}
	near := func(got, want time.Duration) bool { return got > want*99/100 && got < want*101/100 }
	if got := g.Typical("new", []string{"Bash"}); !near(got, 100*time.Second) {
		t.Fatalf("by tool: %v, want 100s", got)
	}
	if got := g.Typical("new", nil); !near(got, 10*time.Second) {
		t.Fatalf("global geometric mean: %v, want 10s", got)
	}
	if got := g.Typical("b", []string{"Bash"}); !near(got, time.Second) {
		t.Fatalf("a session's own gaps win once it has %d: %v", minOwnGaps, got)
	}
	g.Forget("b")
	if got := g.Typical("b", []string{"Bash"}); !near(got, 100*time.Second) {
		t.Fatalf("forgotten session: %v, want its tool's 100s", got)
	}
}

func TestGapModelRemainingGrowsWithTimeAway(t *testing.T) {
	g := NewGapModel(10 * time.Second)
	if got := g.Remaining("s", nil, 2*time.Second); got != 8*time.Second {
		t.Fatalf("early: %v, want 8s", got)
	}
	prev := time.Duration(0)
	for _, e := range []time.Duration{6 * time.Second, 20 * time.Second, time.Minute, time.Hour} {
		got := g.Remaining("s", nil, e)
		if got < prev && e > 10*time.Second {
			t.Fatalf("remaining fell from %v to %v at %v away", prev, got, e)
		}
		prev = got
	}
	if got := g.Remaining("s", nil, time.Hour); got != time.Hour {
		t.Fatalf("an hour away: %v, want another hour", got)
	}
}

// TestGapModelBoundsTheToolsItLearns: tool names are the clients', so a new
// name on every turn must not grow the model without end, nor crowd out
// the tools in use: one heard of recently keeps its estimate.
func TestGapModelBoundsTheToolsItLearns(t *testing.T) {
	g := NewGapModel(time.Minute)
	for i := range 3 * maxTools {
		g.Observe("s", []string{fmt.Sprintf("tool-%d", i)}, time.Hour)
	}
	g.Observe("b", []string{"Bash"}, 2*time.Second)
	if len(g.byTool) > maxTools {
		t.Fatalf("%d tools learnt, bound %d", len(g.byTool), maxTools)
	}
	if got := g.Typical("other", []string{"Bash"}); got != 2*time.Second {
		t.Fatalf("Bash's typical gap %v, want 2s", got)
	}
}

// BenchmarkGapModelNewToolsPastTheBound is a turn naming a new tool when the
// model is full: constant time, as Observe runs under the scheduler's lock.
//
//	go test ./admission -run '^$' -bench GapModelNewTools
func BenchmarkGapModelNewToolsPastTheBound(b *testing.B) {
	g := NewGapModel(time.Minute)
	for i := range maxTools {
		g.Observe("s", []string{fmt.Sprintf("tool-%d", i)}, time.Second)
	}
	names := make([]string, 1024)
	for i := range names {
		names[i] = fmt.Sprintf("new-%d", i)
	}
	b.ResetTimer()
	for i := range b.N {
		g.Observe("s", names[i%len(names):i%len(names)+1], time.Second)
	}
}
