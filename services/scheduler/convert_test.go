package scheduler

import (
	"testing"

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

func TestSessionKeyRoundTrip(t *testing.T) {
	for _, k := range [][2]string{{"t", "s"}, {"", "s"}, {"a/b", "c\x01d"}} {
		got := splitSessionKey(sessionKey(k[0], k[1]))
		if got.Tenant != k[0] || got.SessionID != k[1] {
			t.Fatalf("%q → %+v", k, got)
		}
	}
	if sessionKey("t", "") != "" {
		t.Fatal("no session must stay empty")
	}
}
