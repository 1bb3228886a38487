package servicetest

import (
	"testing"
	"time"
)

// Patience bounds every wait of the kit: far beyond what any of them should take
// on a loaded machine, so that reaching it means a hang, not a slow run.
const Patience = 10 * time.Second

// Eventually polls cond until it holds, failing the test (with what) if it does
// not within Patience.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, Patience, what, cond)
}

// EventuallyWithin is Eventually with a deadline of its own.
func EventuallyWithin(t testing.TB, patience time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(patience, cond) {
		t.Fatalf("gave up after %v waiting for: %s", patience, what)
	}
}

// Poll polls cond until it holds (true) or patience has passed (false), for a
// caller that words its own failure from what it last saw.
func Poll(patience time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(patience)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
	return true
}

// Within waits until ch is closed or receives, failing the test (with what) if
// that does not happen within Patience.
func Within[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	timer := time.NewTimer(Patience)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("gave up after %v waiting for: %s", Patience, what)
	}
}
