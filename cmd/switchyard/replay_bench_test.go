package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"switchyard.dev/pkg/replay"
	"switchyard.dev/pkg/trace"
)

// BenchmarkReplayPoint times one point of docs/results.md at its highest
// concurrency: the Weka sessions on four Llama-3.1-8B/H100 workers, CC128,
// a 30 min warmup and a 2 h window, one seed (the goal: ≤ 30 s each). It
// needs the shared traces beside the repository and skips without them.
//
//	go test ./cmd/switchyard -run XXX -bench ReplayPoint -benchtime 1x -count 3
func BenchmarkReplayPoint(b *testing.B) {
	dir := filepath.Join("..", "..", "..", "shared", "data", "weka-kv-cache-tester", "traces")
	if _, err := os.Stat(dir); err != nil {
		b.Skip("no Weka traces at", dir)
	}
	w, err := loadWorkload(dir, trace.FormatWeka, trace.Options{}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []replay.Policy{replay.PolicyKV, replay.PolicySessionAware, replay.PolicyOracle} {
		b.Run(string(p), func(b *testing.B) {
			c := replay.DefaultConfig()
			c.Policy, c.Concurrency, c.Split = p, 128, replay.SplitTest
			for b.Loop() {
				if _, err := replay.Run(w, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/point")
			b.ReportMetric((c.Warmup+c.Window).Seconds()*float64(b.N)/b.Elapsed().Seconds(), "sim-s/s")
		})
	}
}
