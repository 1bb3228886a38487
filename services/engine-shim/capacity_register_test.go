package engineshim

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit"
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

// goneScheduler has let every worker go: its deregistration answers
// NOT_FOUND, as a scheduler's does once its health check saw the shim stop.
type goneScheduler struct {
	capacityScheduler
}

func (*goneScheduler) DeregisterWorker(context.Context, *schedulerv1.DeregisterWorkerRequest) (*schedulerv1.DeregisterWorkerResponse, error) {
	return nil, status.Error(codes.NotFound, "unknown worker")
}

// A shim that stops after its scheduler let it go (the health check saw it
// NOT_SERVING first) warns of nothing: NOT_FOUND is what it asked for.
func TestStopAfterTheSchedulerLetItGoWarnsOfNothing(t *testing.T) {
	sched := &goneScheduler{}
	cfg := testConfig()
	cfg.SchedulerAddr = servicetest.Serve(t, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	var logs syncBuffer
	run, _ := startShim(t, servicekit.Options{Name: "engine-shim", ShutdownTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}, cfg)
	servicetest.EventuallyWithin(t, 5*time.Second, "a registration", func() bool {
		sched.mu.Lock()
		defer sched.mu.Unlock()
		return len(sched.gpuBlocks) > 0
	})
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); strings.Contains(s, "deregister failed") {
		t.Errorf("warned of a deregistration the scheduler had done already:\n%s", s)
	}
}

// syncBuffer is a bytes.Buffer a logger may write from any goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
