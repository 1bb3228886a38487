package hints

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestToolTimesMedian holds the ordered copy to the ring it mirrors: after
// every sample (repeats, negative ones it ignores, rings of every small
// size and a full one wrapping many times) the median is the ring's sorted
// middle and the count the ring's.
func TestToolTimesMedian(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 2, 3, 5, 64} {
		tt := newToolTimes(size)
		var recent []time.Duration // the last size samples kept, oldest first
		for i := range 1000 {
			d := time.Duration(r.IntN(20)-2) * time.Second
			tt.add(d)
			if size > 0 && d >= 0 {
				recent = append(recent, d)
				if len(recent) > size {
					recent = recent[1:]
				}
			}
			var want time.Duration
			if len(recent) > 0 {
				s := slices.Sorted(slices.Values(recent))
				want = s[(len(s)-1)/2]
			}
			if got := tt.median(); got != want || tt.count() != len(recent) {
				t.Fatalf("size %d sample %d: median %v of %d, want %v of %d", size, i, got, tt.count(), want, len(recent))
			}
		}
	}
}

// BenchmarkToolThreshold is the long-tool threshold an acting program is
// compared with at every tick, with the sample ring full.
func BenchmarkToolThreshold(b *testing.B) {
	e := New(Config{})
	for i := range e.cfg.ToolSamples {
		e.tools.add(time.Duration(i*7919%1000) * time.Millisecond)
	}
	for b.Loop() {
		e.toolThreshold()
	}
}
