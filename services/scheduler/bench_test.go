package scheduler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
)

// staticIndex answers FindMatches in process from a fixed table, so the
// benchmark measures the scheduler, not a network hop.
type staticIndex struct {
	flashindexv1.FlashIndexerServiceClient
	resp []*flashindexv1.FindMatchesResponse
	n    atomic.Uint64
}

func (s *staticIndex) FindMatches(context.Context, *flashindexv1.FindMatchesRequest, ...grpc.CallOption) (*flashindexv1.FindMatchesResponse, error) {
	return s.resp[s.n.Add(1)%uint64(len(s.resp))], nil
}

// PredictRoute accepts predict-on-route's calls (on by default) and keeps
// nothing: the fixed table is the index.
func (s *staticIndex) PredictRoute(context.Context, *flashindexv1.PredictRouteRequest, ...grpc.CallOption) (*flashindexv1.PredictRouteResponse, error) {
	return &flashindexv1.PredictRouteResponse{}, nil
}

// BenchmarkRoute is one turn through the service in process (Route then
// FinishRequest, no gRPC): registry snapshot, overlap conversion, admission
// (session_aware) and scoring, with 100,000 live programs. It reports the
// Route call's p50/p99.
func BenchmarkRoute(b *testing.B) {
	for _, policy := range []string{"kv", "session_aware"} {
		for _, workers := range []int{8, 64, 1024} {
			b.Run(fmt.Sprintf("policy=%s/workers=%d/programs=100000", policy, workers), func(b *testing.B) {
				benchService(b, policy, workers, 100_000)
			})
		}
	}
}

// serviceState is what benchService builds once per size: testing runs
// each benchmark function more than once (b.N = 1 first).
type serviceState struct {
	s    *Service
	reqs []*schedulerv1.RouteRequest
	fins []*schedulerv1.FinishRequestRequest
}

var serviceStates = map[string]*serviceState{}

func benchService(b *testing.B, policy string, workers, programs int) {
	k := fmt.Sprint(policy, workers, programs)
	st := serviceStates[k]
	if st == nil {
		st = newServiceState(b, policy, workers, programs)
		serviceStates[k] = st
	}
	s, reqs, fins := st.s, st.reqs, st.fins
	ctx := context.Background()
	lat := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		start := time.Now()
		if _, err := s.Route(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
		if _, err := s.FinishRequest(ctx, fins[i%len(fins)]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
}

func newServiceState(b *testing.B, policy string, workers, programs int) *serviceState {
	rng := rand.New(rand.NewPCG(1, 2))
	idx := &staticIndex{}
	for range 64 {
		r := &flashindexv1.FindMatchesResponse{}
		for w := range workers {
			if rng.IntN(4) == 0 { // a quarter of the workers hold some prefix
				r.Overlaps = append(r.Overlaps, &flashindexv1.WorkerOverlap{WorkerId: fmt.Sprintf("w%04d", w),
					DeviceBlocks: uint32(rng.IntN(256)), HostExtensionBlocks: uint32(rng.IntN(16))})
			}
		}
		idx.resp = append(idx.resp, r)
	}
	cfg := DefaultConfig()
	cfg.Policy = policy
	cfg.Seed = 3
	s, err := newService(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
		func(n string) string { return "switchyard_scheduler_" + n }, WithFlashIndexer(idx), WithClock(func() time.Time { return t0 }))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for w := range workers {
		wk := worker(fmt.Sprintf("w%04d", w), 1<<40)
		wk.Capacity.MaxRunningRequests = 1 << 20
		if _, err := s.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: wk}); err != nil {
			b.Fatal(err)
		}
	}
	sessions := make([]string, programs)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("s%06d", i)
		if _, err := s.Route(ctx, routeReq("setup", sessions[i], 4096)); err != nil {
			b.Fatal(err)
		}
		if _, err := s.FinishRequest(ctx, finishReq("setup", "", sessions[i], 4096, 256)); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]*schedulerv1.RouteRequest, 1024)
	fins := make([]*schedulerv1.FinishRequestRequest, len(reqs))
	for i := range reqs {
		id := fmt.Sprintf("r%d", i)
		sess := sessions[rng.IntN(programs)]
		reqs[i] = routeReq(id, sess, 4096+16*rng.IntN(64))
		fins[i] = finishReq(id, "", sess, 4200, 100)
	}
	return &serviceState{s: s, reqs: reqs, fins: fins}
}

// BenchmarkPeerSum is what admission's share computation spends on the
// other replicas' use at every turn with two peers: summing what they said
// again ("summed", as it did) against keeping the sum until a poll round
// or a peer's staleness changes it ("kept"; a round every 100 ms is about
// one turn in fifty at a few hundred turns a second, not counted here).
func BenchmarkPeerSum(b *testing.B) {
	for _, workers := range []int{8, 64, 1024} {
		p := &peers{self: "a", stale: time.Hour}
		for _, id := range []string{"b", "c"} {
			q := &peer{id: id, heard: time.Now(), uses: map[string]admission.Use{}}
			for w := range workers {
				q.uses[fmt.Sprintf("worker-%d", w)] = admission.Use{Tokens: float64(w), Users: 1}
			}
			p.list = append(p.list, q)
		}
		b.Run(fmt.Sprintf("workers=%d/summed", workers), func(b *testing.B) {
			sum := map[string]admission.Use{}
			for b.Loop() {
				p.others(sum, time.Now())
			}
		})
		b.Run(fmt.Sprintf("workers=%d/kept", workers), func(b *testing.B) {
			kept := peerSum{use: map[string]admission.Use{}}
			for b.Loop() {
				kept.refresh(p, time.Now())
			}
		})
	}
}
