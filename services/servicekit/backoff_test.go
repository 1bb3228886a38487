package servicekit

import (
	"context"
	"flag"
	"io"
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

func TestBackoffNextDoublesToMaxWithJitter(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for i, base := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		base *= time.Millisecond
		if d := b.Next(); d < base*3/4 || d > base*5/4 {
			t.Errorf("delay %d = %v, want %v ± 25%%", i, d, base)
		}
	}
	b.Reset()
	if d := b.Next(); d > 125*time.Millisecond {
		t.Errorf("after Reset: %v, want about Min", d)
	}
}

func TestBackoffWithDefaults(t *testing.T) {
	d := DefaultBackoff()
	for _, tc := range []struct{ in, want Backoff }{
		{Backoff{}, d},
		{Backoff{Min: time.Millisecond, Max: time.Second}, Backoff{Min: time.Millisecond, Max: time.Second}},
		{Backoff{Min: time.Millisecond}, Backoff{Min: time.Millisecond, Max: d.Max}},
		{Backoff{Min: time.Minute}, Backoff{Min: time.Minute, Max: time.Minute}},
		// A Max below Min bounds every delay: --backoff-max 50ms alone
		// gave 5 s.
		{Backoff{Min: time.Minute, Max: time.Second}, Backoff{Min: time.Second, Max: time.Second}},
		{Backoff{Min: d.Min, Max: 50 * time.Millisecond}, Backoff{Min: 50 * time.Millisecond, Max: 50 * time.Millisecond}},
	} {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// The flags refuse a delay of 0 or less, which WithDefaults would replace
// by the default without a word.
func TestBackoffFlagsArePositive(t *testing.T) {
	for _, args := range [][]string{{"--backoff-min", "-1s"}, {"--backoff-max", "0s"}} {
		fs := flag.NewFlagSet("svc", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		b := DefaultBackoff()
		b.RegisterFlags(fs, "a peer")
		if err := fs.Parse(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
