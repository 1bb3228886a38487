//go:build faults

package faultsuite

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkReplicaProcesses is what replication costs when every service is
// its own process, as compose and Kubernetes run them: one scheduler or
// three (-bench 'ReplicaProcesses/schedulers=3' runs one), one frontend, one
// flash indexer, the session-prefix indexer, the hint emitter and four shims
// (simulated engines at 1000× speed). The load is eight agent sessions,
// streamed, each growing turn by turn from a system prompt of about 20k
// tokens; like BenchmarkReplicas (internal/mesh) in size, not in every
// detail (that one is not streamed), and the prompts grow with -benchtime,
// so only figures of one -benchtime compare. Each process's CPU is read from
// /proc around the measured turns, so a replica's whole cost is in it: its
// own heap and garbage collection, its runtime, and keeping in step with its
// peers (the admission-use exchange, health checks) while the turns run.
// scheduler-us/turn is every scheduler replica's CPU summed, per routing
// decision.
//
//	go test -tags faults ./internal/faultsuite -run '^$' -bench ReplicaProcesses -benchtime 4000x
//
// (/proc counts in ticks of 10 ms: give it a few thousand turns.)
func BenchmarkReplicaProcesses(b *testing.B) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		b.Skip("needs Linux /proc")
	}
	bin := Binary(b, b.TempDir())
	for _, schedulers := range []int{1, 3} {
		b.Run(fmt.Sprintf("schedulers=%d", schedulers), func(b *testing.B) { benchReplicaProcesses(b, bin, schedulers) })
	}
}

func benchReplicaProcesses(b *testing.B, bin string, schedulers int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := NewMesh(MeshConfig{Bin: bin, Dir: b.TempDir(), Workers: workers, Schedulers: schedulers,
		Extra: map[string][]string{
			// As BenchmarkReplicas: every warm turn stays on its worker.
			"scheduler":   {"--policy", "session_aware"},
			"engine-shim": {"--speedup", "1000"},
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop()
	if err := m.Start(ctx); err != nil {
		b.Fatalf("mesh did not start: %v\n%s", err, m.Tails(20))
	}
	client := NewClient(m.Frontends(), sessions)
	defer client.Close()
	load := make([]*Session, sessions)
	for i := range load {
		id := fmt.Sprintf("bench-%d", i)
		// 1,330 statements of the instructions: about 20k tokens.
		load[i] = &Session{ID: id, Kind: "session", MaxTokens: 8, SystemRepeat: 1_330}
		if t := load[i].Turn(ctx, client); !t.OK() { // the cold turn
			b.Fatalf("session %s: first turn failed: status %d %s", id, t.Status, t.Err)
		}
	}

	before, err := cpuOf(m.Procs)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	var (
		next   atomic.Int64
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	for _, s := range load {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if !s.Turn(ctx, client).OK() {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after, err := cpuOf(m.Procs)
	if err != nil {
		b.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d turns failed", n, b.N)
	}

	perTurn := func(service string) float64 {
		var d time.Duration
		for _, p := range m.Procs {
			if service == "" || p.Service == service {
				d += after[p.ID] - before[p.ID]
			}
		}
		return float64(d.Microseconds()) / float64(b.N)
	}
	var control float64
	for _, svc := range []string{"frontend", "scheduler", "flash-indexer", "session-prefix-indexer", "kvhint-emitter"} {
		us := perTurn(svc)
		control += us
		b.ReportMetric(us, svc+"-us/turn")
	}
	b.ReportMetric(control, "control-plane-us/turn")
	b.ReportMetric(perTurn("engine-shim"), "shim-us/turn")
	b.ReportMetric(perTurn(""), "mesh-us/turn")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "turns/s")
}

// cpuOf is each running process's CPU time so far (user and system, every
// thread's, those that ended included), by process id.
func cpuOf(procs []*Proc) (map[string]time.Duration, error) {
	out := make(map[string]time.Duration, len(procs))
	for _, p := range procs {
		d, err := processCPU(p.Pid())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.ID, err)
		}
		out[p.ID] = d
	}
	return out, nil
}
