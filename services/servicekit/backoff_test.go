package servicekit

import (
	"context"
	"testing"
	"time"
)

func TestBackoffDoublesUpToMax(t *testing.T) {
	b := Backoff{Min: time.Millisecond, Max: 4 * time.Millisecond}
	var seen []time.Duration
	for range 5 {
		if !b.Wait(context.Background()) {
			t.Fatal("Wait returned false without cancellation")
		}
		seen = append(seen, b.cur)
	}
	want := []time.Duration{1, 2, 4, 4, 4}
	for i, w := range want {
		if seen[i] != w*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", seen, want)
		}
	}
	b.Reset()
	b.Wait(context.Background())
	if b.cur != time.Millisecond {
		t.Fatalf("after Reset the delay is %v, want Min", b.cur)
	}
}

func TestBackoffStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Backoff{Min: time.Hour, Max: time.Hour}
	if b.Wait(ctx) {
		t.Fatal("Wait returned true on a cancelled context")
	}
}
