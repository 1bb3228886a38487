package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/servicekit/servicetest"
)

// shimHealth serves grpc.health.v1 on loopback, as a shim's servicekit does,
// and returns its address and status setter, which counts the checks.
func shimHealth(t *testing.T) (string, *countingHealth) {
	t.Helper()
	hs := &countingHealth{Server: health.NewServer()}
	return servicetest.Serve(t, func(g *grpc.Server) { healthpb.RegisterHealthServer(g, hs) }), hs
}

// countingHealth is a health server that counts the checks it answered.
type countingHealth struct {
	*health.Server
	checks atomic.Int64
}

func (h *countingHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	defer h.checks.Add(1)
	return h.Server.Check(ctx, req)
}

func workerAt(id, addr string) *workerv1.Worker {
	w := worker(id, 1<<20)
	w.Address = addr
	return w
}

func (h *harness) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// waitRegistered polls until worker id's registration is want.
func (h *harness) waitRegistered(t *testing.T, id string, want bool, within time.Duration) {
	t.Helper()
	if !servicetest.Poll(within, func() bool { _, ok := h.svc.reg.Get(id); return ok == want }) {
		t.Fatalf("worker %s registered = %v after %v, want %v", id, !want, within, want)
	}
}

func TestHealthChecksDeregisterDeadAndNotServingShims(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.WorkerHealthInterval = 20 * time.Millisecond
		c.WorkerHealthTimeout = 500 * time.Millisecond
	})
	liveAddr, live := shimHealth(t)
	drainingAddr, draining := shimHealth(t)
	h.register(t, workerAt("live", liveAddr), workerAt("dead", servicetest.FreeAddr(t)), workerAt("draining", drainingAddr))
	h.run(t)
	h.waitRegistered(t, "dead", false, 5*time.Second)
	draining.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.waitRegistered(t, "draining", false, 5*time.Second)
	// A shim that answers NOT_SERVING is stopping: no failure of its health.
	if n := testutil.ToFloat64(h.svc.metrics.healthFailures); n != 1 {
		t.Errorf("health failures %v, want 1 (the dead shim's, not the stopping one's)", n)
	}
	// Many rounds later the healthy shim is still there: it has answered ten
	// more checks, each of which could have deregistered it.
	seen := live.checks.Load()
	servicetest.Eventually(t, "ten more checks of the healthy shim", func() bool { return live.checks.Load() >= seen+10 })
	if _, ok := h.svc.reg.Get("live"); !ok {
		t.Fatal("a healthy shim was deregistered")
	}
	// A deregistered worker comes back by registering again.
	h.register(t, workerAt("draining", drainingAddr))
	if _, ok := h.svc.reg.Get("draining"); !ok {
		t.Fatal("re-registration refused")
	}
}

func TestReportedFailureIsCheckedAtOnce(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.WorkerHealthInterval = time.Hour // only the report can trigger a check
	})
	liveAddr, _ := shimHealth(t)
	h.register(t, workerAt("live", liveAddr), workerAt("dead", servicetest.FreeAddr(t)))
	h.run(t)
	ctx := context.Background()
	for _, id := range []string{"live", "dead"} {
		if _, err := h.client.Route(ctx, routeReq("r-"+id, "s-"+id, 64)); err != nil {
			t.Fatal(err)
		}
		f := finishReq("r-"+id, id, "s-"+id, 64, 0)
		f.WorkerFailed = true
		if _, err := h.client.FinishRequest(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	h.waitRegistered(t, "dead", false, 5*time.Second)
	if _, ok := h.svc.reg.Get("live"); !ok {
		t.Fatal("a report against a shim that answers its health check removed it")
	}
}

// TestRestartKeepsSessionsOnTheirWorker: a scheduler that starts afresh knows
// no program, yet a session's next turn goes back to the worker that holds
// its prefix (placement is rebuilt from the index), under the default policy
// and under session_aware; the old process's FinishRequest is accepted and
// changes nothing.
func TestRestartKeepsSessionsOnTheirWorker(t *testing.T) {
	for _, policy := range []string{"", "session_aware"} {
		t.Run("policy="+policy, func(t *testing.T) {
			index := &fakeIndex{}
			index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w2", DeviceBlocks: 6})
			ctx := context.Background()
			var before string
			for life := range 2 { // the first process, then its restart
				h := newHarnessIndex(t, func(c *Config) { c.Policy = policy }, index)
				h.register(t, worker("w1", 1<<20), worker("w2", 1<<20), worker("w3", 1<<20))
				if life == 1 {
					// The old process routed r1; its finish reaches the new one.
					if _, err := h.client.FinishRequest(ctx, finishReq("r1", before, "s", 128, 8)); err != nil {
						t.Fatalf("finish of a request the old process routed: %v", err)
					}
				}
				resp, err := h.client.Route(ctx, routeReq(fmt.Sprintf("r%d", life+1), "s", 128))
				if err != nil {
					t.Fatal(err)
				}
				if life == 0 {
					before = resp.GetWorkerId()
				} else if resp.GetWorkerId() != before {
					t.Errorf("after the restart the session went to %s, before to %s", resp.GetWorkerId(), before)
				}
			}
			if before != "w2" {
				t.Errorf("first route went to %s, want w2 (the prefix holder)", before)
			}
		})
	}
}

// A worker that registers again between its removal from the registry (a
// lapsed lease, a failed health check) and the scheduler forgetting it
// (which waits for the pipeline's lock) keeps its admission capacity: it
// is registered and routed to, and its heartbeats succeed, so it never
// registers again to get it back.
func TestWorkerRegisteredAgainWhileForgottenKeepsItsCapacity(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, worker("w1", 1<<20))
	// The removal's first half: the registry.
	if _, err := h.svc.reg.Deregister("w1"); err != nil {
		t.Fatal(err)
	}
	h.register(t, worker("w1", 1<<20)) // the shim, told NOT_FOUND, registers again
	h.svc.metrics.routes.WithLabelValues("kv", "w1", "cost").Inc()
	h.svc.forgetWorker("w1") // the removal's second half, late
	if n := testutil.CollectAndCount(h.svc.metrics.routes); n != 1 {
		t.Errorf("the registered worker's routes series: %d, want kept", n)
	}
	if _, ok := h.svc.reg.Get("w1"); !ok {
		t.Fatal("the registration was lost")
	}
	h.svc.mu.Lock()
	util := h.svc.ctrl.Utilization(t0)
	h.svc.mu.Unlock()
	if len(util) != 1 || util[0].Worker != "w1" || util[0].Capacity.Tokens != 1<<20 {
		t.Fatalf("admission's workers after the registration: %+v", util)
	}
}
