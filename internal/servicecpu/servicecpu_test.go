package servicecpu

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
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
	s, err := Measure("service", apart, 0, func() error {
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
	if _, err := Measure("service", nil, 1000, func() error { return nil }); err == nil {
		t.Fatal("Measure under another profile did not fail")
	}
}

// At 250 Hz (the kernel tick of these machines, the most Linux samples a
// thread's CPU time at) the profile samples every 4 ms: two and a half
// times the samples of the default, and the sampled time still what the
// work took.
func TestMeasureAtAHigherRate(t *testing.T) {
	if testing.Short() {
		t.Skip("burns CPU")
	}
	s, err := Measure("service", nil, 250, func() error {
		pprof.Do(context.Background(), pprof.Labels("service", "a"), func(context.Context) { sink ^= spin(300) })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Period != 4*time.Millisecond {
		t.Fatalf("period %v, want 4ms", s.Period)
	}
	p, err := profile.ParseData(s.Profile)
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for _, sm := range p.Sample {
		samples += sm.Value[0] // samples/count
	}
	if samples < 50 || time.Duration(samples)*s.Period != s.Sampled {
		t.Fatalf("%d samples of %v for %v sampled", samples, s.Period, s.Sampled)
	}
	if r := float64(s.By["a"]) / float64(s.Process); r < 0.7 || r > 1.1 {
		t.Errorf("sampled %v of the process's %v", s.By["a"], s.Process)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
