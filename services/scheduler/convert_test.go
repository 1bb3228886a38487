package scheduler

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/routing"
)

func TestScoresToProtoKeepsChosenAndCheapest(t *testing.T) {
	costs := []float64{9, 3, 7, 1, 5, 8, 2}
	scores := make([]routing.Score, len(costs))
	for i, c := range costs {
		scores[i] = routing.Score{Worker: string(rune('a' + i)), Cost: c}
	}
	// Chosen is not the cheapest (a soft binding, say): it comes first.
	got := scoresToProto(scores, 0, 4)
	want := []string{"a", "d", "g", "b"}
	if len(got) != len(want) {
		t.Fatalf("got %d scores", len(got))
	}
	for i, w := range want {
		if got[i].GetWorkerId() != w {
			t.Fatalf("position %d: %s, want %s (%v)", i, got[i].GetWorkerId(), w, got)
		}
	}
	if !got[0].GetChosen() || got[1].GetChosen() {
		t.Fatal("chosen flag wrong")
	}
	if all := scoresToProto(scores, 3, 0); len(all) != len(scores) || all[0].GetWorkerId() != "d" {
		t.Fatalf("limit 0: %v", all)
	}
}

// selectScoresReference is the plain O(n·limit) selection scoresToProto
// used before it stopped rescanning for the worst kept score: the oracle of
// the differential test below.
func selectScoresReference(scores []routing.Score, chosen, limit int) []int {
	idx := []int{chosen}
	for i := range scores {
		if i == chosen {
			continue
		}
		if len(idx) < limit {
			idx = append(idx, i)
			continue
		}
		worst := 1
		for j := 2; j < len(idx); j++ {
			if scores[idx[j]].Cost > scores[idx[worst]].Cost {
				worst = j
			}
		}
		if scores[i].Cost < scores[idx[worst]].Cost {
			idx[worst] = i
		}
	}
	rest := idx[1:]
	sort.Slice(rest, func(a, b int) bool { return scores[rest[a]].Cost < scores[rest[b]].Cost })
	return idx
}

func TestScoresToProtoMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for trial := range 2000 {
		n := 1 + rng.IntN(300)
		scores := make([]routing.Score, n)
		for i := range scores {
			// Few distinct costs: ties everywhere.
			scores[i] = routing.Score{Worker: fmt.Sprintf("w%03d", i), Cost: float64(rng.IntN(1 + trial%20))}
		}
		chosen, limit := rng.IntN(n), 2+rng.IntN(10)
		if limit >= n {
			continue
		}
		want := selectScoresReference(scores, chosen, limit)
		got := scoresToProto(scores, chosen, limit)
		for k, i := range want {
			if got[k].GetWorkerId() != scores[i].Worker {
				t.Fatalf("trial %d position %d: %s, want %s", trial, k, got[k].GetWorkerId(), scores[i].Worker)
			}
		}
	}
}

func TestProgramToProtoShowsWhatTheIndexSaidItHolds(t *testing.T) {
	p := admission.Program{Phase: admission.Acting, Lifecycle: admission.Active, Worker: "w", TokenTotal: 900, Held: 160, HeldSeen: true}
	if got := programToProto(p, time.Time{}); got.HeldTokens == nil || got.GetHeldTokens() != 160 {
		t.Fatalf("an answered idle program: %v", got)
	}
	for _, q := range []admission.Program{
		{Phase: admission.Acting, TokenTotal: 900}, // not asked yet
		{Phase: admission.Reasoning, Lifecycle: admission.Active, Worker: "w", TokenTotal: 900, Held: 160, HeldSeen: true}, // a turn runs: its prompt counts
		{Phase: admission.Acting, Lifecycle: admission.Paused, TokenTotal: 900, Held: 160, HeldSeen: true},                 // paused: it counts whole among the paused
	} {
		if got := programToProto(q, time.Time{}); got.HeldTokens != nil {
			t.Fatalf("%+v: held_tokens %d", q, got.GetHeldTokens())
		}
	}
}

// A program paused now counts its pause so far in paused_total, beside the
// pauses that ended.
func TestProgramToProtoCountsThePauseGoingOn(t *testing.T) {
	at := time.Unix(1000, 0)
	p := admission.Program{Lifecycle: admission.Paused, PausedAt: at, PausedTotal: 2 * time.Second}
	if got := programToProto(p, at.Add(5*time.Second)).GetPausedTotal().AsDuration(); got != 7*time.Second {
		t.Errorf("paused 5 s after 2 s of earlier pauses: paused_total %v, want 7s", got)
	}
	p.Lifecycle = admission.Active
	if got := programToProto(p, at.Add(5*time.Second)).GetPausedTotal().AsDuration(); got != 2*time.Second {
		t.Errorf("active: paused_total %v, want the 2s of its ended pauses", got)
	}
}
