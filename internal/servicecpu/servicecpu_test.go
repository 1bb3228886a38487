package servicecpu

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"time"
)

// spin burns CPU for n units of work (a fixed amount, not a time: on a
// loaded machine a goroutine gets less CPU than wall time).
//
//go:noinline
func spin(n int) uint64 {
	x := uint64(88172645463325252)
	for range n * 1_000_000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

//go:noinline
func spinApart(n int) uint64 { return spin(n) }

var sink uint64

// Two labelled goroutines that do work 3:1 are split about 3:1, and the work
// under an Apart prefix (as much as the second's) is counted apart from its
// goroutine's label.
func TestMeasureSplitsByLabel(t *testing.T) {
	if testing.Short() {
		t.Skip("burns CPU for a second")
	}
	apart := []Apart{{Prefix: "switchyard.dev/internal/servicecpu.spinApart", Name: "apart"}}
	s, err := Measure("service", apart, func() error {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for name, n := range map[string]int{"a": 600, "b": 200} {
			wg.Go(func() {
				pprof.Do(context.Background(), pprof.Labels("service", name), func(context.Context) {
					x := spin(n)
					if name == "b" {
						x ^= spinApart(n)
					}
					mu.Lock()
					sink ^= x
					mu.Unlock()
				})
			})
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("split %v, sampled %v, process %v", s.By, s.Sampled, s.Process)
	a, b, ap := s.By["a"], s.By["b"], s.By["apart"]
	if b < 50*time.Millisecond || ap < 50*time.Millisecond {
		t.Fatalf("a %v, b %v, apart %v: too few samples to compare", a, b, ap)
	}
	if r := float64(a) / float64(b); r < 2 || r > 4.5 {
		t.Errorf("a/b = %.2f, want about 3", r)
	}
	if r := float64(ap) / float64(b); r < 0.5 || r > 2 {
		t.Errorf("apart/b = %.2f, want about 1", r)
	}
	if s.Process < s.Sampled/2 {
		t.Errorf("process CPU %v below half the sampled %v", s.Process, s.Sampled)
	}
}

func TestMeasureWhileAnotherProfileRuns(t *testing.T) {
	if err := pprof.StartCPUProfile(discard{}); err != nil {
		t.Skip("a CPU profile is already running (go test -cpuprofile)")
	}
	defer pprof.StopCPUProfile()
	if _, err := Measure("service", nil, func() error { return nil }); err == nil {
		t.Fatal("Measure under another profile did not fail")
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
