package admission

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// filled caches the controllers fill built: testing runs each benchmark
// function more than once (b.N = 1 first), and building 100,000 programs
// is the slow part.
var filled = map[[2]int]*Controller{}

// fill creates programs ACTING on workers, round robin, with capacity to
// spare so no tick pauses anything.
func fill(b *testing.B, workers, programs int) *Controller {
	if c := filled[[2]int{workers, programs}]; c != nil {
		return c
	}
	c := newCtl(b, nil)
	defer func() { filled[[2]int{workers, programs}] = c }()
	for i := range workers {
		c.SetWorker(fmt.Sprintf("w%04d", i), Capacity{Tokens: 1 << 40, MaxPrograms: 1 << 20})
	}
	for i := range programs {
		s := fmt.Sprintf("s%06d", i)
		a := c.Admit(t0, Turn{Key: key(s), PromptTokens: 4096}, nil)
		if a.Verdict != Run {
			b.Fatalf("setup: %v", a.Verdict)
		}
		c.Placed(t0, key(s), fmt.Sprintf("w%04d", i%workers))
		c.Finish(t0, key(s), 4096, 256, nil)
	}
	return c
}

// BenchmarkAdmitFinish is one turn of an existing program through admission:
// Admit (pinned), then Finish, with 100,000 live programs.
func BenchmarkAdmitFinish(b *testing.B) {
	for _, workers := range []int{8, 64, 1024} {
		b.Run(fmt.Sprintf("workers=%d/programs=100000", workers), func(b *testing.B) {
			c := fill(b, workers, 100_000)
			keys := make([]Key, 100_000)
			for i := range keys {
				keys[i] = key(fmt.Sprintf("s%06d", i))
			}
			lat := make([]time.Duration, 0, min(b.N, 1<<20))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := range b.N {
				k := keys[i%len(keys)]
				start := time.Now()
				a := c.Admit(t0, Turn{Key: k, PromptTokens: 4200}, nil)
				if a.Verdict != Run {
					b.Fatal(a.Verdict)
				}
				c.Finish(t0, k, 4200, 100, nil)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(start))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			}
		})
	}
}

// BenchmarkTick is one steady-state control step over 100,000 live programs
// (nothing to pause, resume or expire: the cost of looking).
func BenchmarkTick(b *testing.B) {
	for _, workers := range []int{8, 64, 1024} {
		b.Run(fmt.Sprintf("workers=%d/programs=100000", workers), func(b *testing.B) {
			c := fill(b, workers, 100_000)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				c.Tick(t0.Add(time.Second))
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkSetShares is what a scheduler replica's admission does at every
// turn before deciding (two others, each using some of every worker): its
// share of each worker from its own use now and theirs as last heard, then
// the turn itself (Admit and Finish of one of the programs, which changes
// its own use on that program's worker). The others' uses are heard now and
// then: version=kept passes the same version while they hold, version=0
// says nothing (every worker computed again, as before versions).
func BenchmarkSetShares(b *testing.B) {
	for _, workers := range []int{8, 64, 1024} {
		for _, kept := range []bool{true, false} {
			version := map[bool]string{true: "kept", false: "0"}[kept]
			b.Run(fmt.Sprintf("workers=%d/programs=100000/version=%s", workers, version), func(b *testing.B) {
				benchSetShares(b, workers, kept)
			})
		}
	}
}

func benchSetShares(b *testing.B, workers int, kept bool) {
	c := fill(b, workers, 100_000)
	totals := map[string]Capacity{}
	for i := range workers {
		totals[fmt.Sprintf("w%04d", i)] = Capacity{Tokens: 1 << 40, MaxPrograms: 1 << 20}
	}
	others := func(string) Use { return Use{Tokens: 1 << 30, Users: 2} }
	v := uint64(0)
	if kept {
		v = 1
	}
	keys := make([]Key, 1000)
	for i := range keys {
		keys[i] = key(fmt.Sprintf("s%06d", i))
	}
	turn := 0
	b.ReportAllocs()
	for b.Loop() {
		c.SetShares(totals, others, 3, v)
		k := keys[turn%len(keys)]
		turn++
		c.Admit(t0, Turn{Key: k, PromptTokens: 4096}, nil)
		c.Finish(t0, k, 4096, 256, nil)
	}
	for id, cp := range totals { // whole again
		c.SetWorker(id, cp)
	}
}
