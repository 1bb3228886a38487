package engineshim

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit/servicetest"
)

// capacityScheduler records the capacity of each registration.
type capacityScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	mu        sync.Mutex
	gpuBlocks []uint32
}

func (f *capacityScheduler) RegisterWorker(_ context.Context, req *schedulerv1.RegisterWorkerRequest) (*schedulerv1.RegisterWorkerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gpuBlocks = append(f.gpuBlocks, req.GetWorker().GetCapacity().GetGpuBlocks())
	return &schedulerv1.RegisterWorkerResponse{LeaseTtl: durationpb.New(150 * time.Millisecond)}, nil
}

func (f *capacityScheduler) Heartbeat(context.Context, *schedulerv1.HeartbeatRequest) (*schedulerv1.HeartbeatResponse, error) {
	return &schedulerv1.HeartbeatResponse{LeaseTtl: durationpb.New(150 * time.Millisecond)}, nil
}

func (f *capacityScheduler) DeregisterWorker(context.Context, *schedulerv1.DeregisterWorkerRequest) (*schedulerv1.DeregisterWorkerResponse, error) {
	return &schedulerv1.DeregisterWorkerResponse{}, nil
}

// A shim starts beside an engine still loading its weights (its /metrics
// does not answer yet), so it registers knowing no KV capacity. Once the
// engine reports its capacity the scheduler must learn it: heartbeats carry
// only load, and admission sizes the worker by its registration.
func TestRealEngineRegistersItsCapacityOnceKnown(t *testing.T) {
	var up atomic.Bool
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() || r.URL.Path != "/metrics" {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, `vllm:cache_config_info{block_size="16",num_gpu_blocks="2000",num_cpu_blocks="0"} 1.0`)
	}))
	defer engine.Close()

	sched := &capacityScheduler{}
	cfg := testConfig()
	cfg.Engine = "vllm"
	cfg.BlockSize = 16
	cfg.Adapter.URL = engine.URL
	cfg.Adapter.EventsEndpoint = ""
	cfg.Adapter.MetricsInterval = 10 * time.Millisecond
	cfg.SchedulerAddr = servicetest.Serve(t, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	start(t, cfg)

	registrations := func() []uint32 {
		sched.mu.Lock()
		defer sched.mu.Unlock()
		return append([]uint32(nil), sched.gpuBlocks...)
	}
	servicetest.EventuallyWithin(t, 5*time.Second, "a registration", func() bool { return len(registrations()) > 0 })
	if got := registrations(); got[0] != 0 {
		t.Fatalf("registered with %d GPU blocks before the engine answered", got[0])
	}
	up.Store(true) // the engine has loaded
	servicetest.EventuallyWithin(t, 5*time.Second, "a registration with the engine's 2000 blocks", func() bool {
		got := registrations()
		return got[len(got)-1] == 2000
	})
}
