package replay

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRun replays a synthetic workload of growing sessions; it reports
// simulated seconds per wall second and turns per second.
//
//	go test -run XXX -bench Run -cpuprofile cpu.out ./pkg/replay
func BenchmarkRun(b *testing.B) {
	for _, n := range []int{16, 128} {
		w := randomWorkload(11, n)
		for _, p := range []Policy{PolicyKV, PolicySessionAware} {
			b.Run(fmt.Sprintf("sessions=%d/%s", n, p), func(b *testing.B) {
				c := smallConfig(p, 4, n/2)
				c.Engine.NumGPUBlocks = 2000
				c.Window = 30 * time.Minute
				var sim, turns float64
				for b.Loop() {
					r, err := Run(w, c)
					if err != nil {
						b.Fatal(err)
					}
					sim += r.WarmupS + r.WindowS
					turns += float64(r.Turns)
				}
				b.ReportMetric(sim/b.Elapsed().Seconds(), "sim-s/s")
				b.ReportMetric(turns/b.Elapsed().Seconds(), "turns/s")
			})
		}
	}
}
