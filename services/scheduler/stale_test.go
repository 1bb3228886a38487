package scheduler

import (
	"context"
	"testing"
	"time"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// A turn its worker's heartbeats name as running long keeps its load past
// --stale-request-after, counted from the last heartbeat that named it; a
// turn no heartbeat names (its finish lost) is swept at the stale age, and
// so is the long one once the heartbeats stop naming it (its frontend went
// away and the shim ended it).
func TestHeartbeatsKeepLongRunningTurns(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	for _, id := range []string{"long", "lost"} {
		if _, err := h.client.Route(ctx, routeReq(id, "s-"+id, 160)); err != nil {
			t.Fatal(err)
		}
	}
	// In flight: its load counted, and a later turn of its session waits
	// for its finish.
	inFlight := func(id string) bool {
		h.svc.mu.Lock()
		_, loaded := h.svc.pipe.Router().Load().RequestWorker(id)
		h.svc.mu.Unlock()
		h.svc.preds.mu.Lock()
		_, awaited := h.svc.preds.byID[id]
		h.svc.preds.mu.Unlock()
		if loaded != awaited {
			t.Fatalf("%s: load counted %v, awaited %v", id, loaded, awaited)
		}
		return loaded
	}
	beat := func(running ...string) {
		t.Helper()
		if _, err := h.client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: "w1", Load: &workerv1.WorkerLoad{RunningRequests: 1},
			LongRunningRequestIds: running}); err != nil {
			t.Fatal(err)
		}
	}
	stale := h.svc.cfg.Routing.StaleRequestAfter
	for h.clock.Now().Before(t0.Add(2 * stale)) {
		h.clock.Advance(10 * time.Second)
		beat("long")
		h.svc.tick(ctx)
	}
	if !inFlight("long") || inFlight("lost") {
		t.Fatalf("after twice the stale age: long in flight %v (want true), lost %v (want false)", inFlight("long"), inFlight("lost"))
	}
	last := h.clock.Now()
	for h.clock.Now().Before(last.Add(stale)) {
		if !inFlight("long") {
			t.Fatalf("long swept %v after the last heartbeat naming it, before the stale age", h.clock.Now().Sub(last))
		}
		h.clock.Advance(10 * time.Second)
		beat()
		h.svc.tick(ctx)
	}
	if inFlight("long") {
		t.Fatalf("long still in flight %v after the last heartbeat naming it", h.clock.Now().Sub(last))
	}
}

// A stale age shorter than the shims take to name a running turn is refused.
func TestStaleAgeBelowTheHeartbeatsPromiseIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Routing.StaleRequestAfter = time.Minute
	if _, err := cfg.withDefaults(); err == nil {
		t.Fatal("a 1 minute stale age was taken")
	}
	cfg.Routing.StaleRequestAfter = -time.Minute
	if _, err := cfg.withDefaults(); err == nil {
		t.Fatal("a negative stale age was taken")
	}
	cfg.Routing.StaleRequestAfter = 0 // never
	if _, err := cfg.withDefaults(); err != nil {
		t.Fatal(err)
	}
}
