package hints

import (
	"fmt"
	"testing"
	"time"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// mapView answers lineage from a map, so the benchmark measures the engine.
type mapView map[string][]sessionindex.Chain

func (m mapView) Lineage(s, w string) ([]sessionindex.Chain, error) { return m[s], nil }
func (m mapView) KVUsage(string) (float64, bool)                    { return 0.9, true }

// BenchmarkDecide is one tick over n programs, a tenth of them in a tool
// call past the threshold (so they are demoted once) and the rest
// reasoning; after the first round most ticks find nothing to do, which is
// the steady state the emitter's tick pays for.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("programs=%d", n), func(b *testing.B) {
			e := New(Config{})
			v := mapView{}
			for i := 0; i < n; i++ {
				s := fmt.Sprintf("s%d", i)
				w := fmt.Sprintf("w%d", i%8)
				blocks := make([]kv.BlockHash, 64)
				for j := range blocks {
					blocks[j] = kv.BlockHash(i<<16 | j + 1)
				}
				v[s] = []sessionindex.Chain{{Worker: w, Blocks: blocks}}
				p := Program{Session: s, Phase: PhaseReasoning, Lifecycle: LifecycleActive, Worker: w, PhaseSince: t0}
				if i%10 == 0 {
					p.Phase = PhaseActing
				}
				e.Observe(t0, p)
			}
			now := t0.Add(time.Minute)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.Decide(now, v)
			}
		})
	}
}
