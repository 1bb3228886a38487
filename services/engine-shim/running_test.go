package engineshim

import (
	"slices"
	"testing"
	"time"
)

// A request is named once it has run the bound, until its last stream ends:
// a retry's stream that overlaps the end of the one it replaces keeps the
// first one's start; an empty id is never named.
func TestRunningRequestsNamedUntilTheirLastStreamEnds(t *testing.T) {
	r := newRunningRequests()
	t0 := time.Unix(1000, 0)
	doneA := r.start("a", t0)
	r.start("", t0)
	doneB := r.start("b", t0.Add(20*time.Second))
	retryA := r.start("a", t0.Add(25*time.Second))
	check := func(at time.Duration, want ...string) {
		t.Helper()
		if got := r.longer(t0.Add(at), 30*time.Second); !slices.Equal(got, want) {
			t.Fatalf("at %v: named %v, want %v", at, got, want)
		}
	}
	check(29 * time.Second)
	check(30*time.Second, "a")
	check(50*time.Second, "a", "b")
	doneA()
	check(50*time.Second, "a", "b") // a's retry still runs
	retryA()
	doneB()
	check(time.Hour)
}
