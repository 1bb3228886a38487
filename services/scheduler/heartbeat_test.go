package scheduler

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// A heartbeat sampled while a turn ran but arriving after its finish (it was
// on its way) still counts the turn: the finish stays taken out of it, and
// the session's next turn finds its worker as free as it is, not charged
// for the turn before, which would send it to another worker without its
// prefix.
func TestHeartbeatOnItsWayDuringAFinishDoesNotChargeIt(t *testing.T) {
	h := newHarness(t, nil) // kv: cost against the cache
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20), worker("w2", 1<<20))
	h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w1", DeviceBlocks: 10})
	beat := func(id string, load *workerv1.WorkerLoad) {
		t.Helper()
		if _, err := h.client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: id, Load: load}); err != nil {
			t.Fatal(err)
		}
	}
	for turn, id := range []string{"r1", "r2", "r3"} {
		resp, err := h.client.Route(ctx, routeReq(id, "s", 160+16*turn))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetWorkerId() != "w1" {
			t.Fatalf("turn %s went to %s, want w1, which holds its prefix", id, resp.GetWorkerId())
		}
		if _, err := h.client.FinishRequest(ctx, finishReq(id, "w1", "s", 160+16*turn, 16)); err != nil {
			t.Fatal(err)
		}
		// w1's sample was taken while the turn ran; w2 is idle.
		beat("w1", &workerv1.WorkerLoad{RunningRequests: 1, ActiveKvBlocks: uint32(11 + turn), TotalKvBlocks: 1 << 16})
		beat("w2", &workerv1.WorkerLoad{TotalKvBlocks: 1 << 16})
	}
}

// A heartbeat whose sample is older than its trip (a real engine's metrics
// scraped a second before) still has the turns that finished since taken
// out of it; an age past a lease counts as a lease.
func TestHeartbeatLoadAgeKeepsFinishesSinceItsSample(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20), worker("w2", 1<<20))
	h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w1", DeviceBlocks: 10})
	freed := func() int {
		h.svc.mu.Lock()
		defer h.svc.mu.Unlock()
		return h.svc.pipe.Router().Load().Worker("w1").FreedRequests
	}
	// running: the sample counts the turn before as running.
	beat := func(age time.Duration, running uint32) {
		t.Helper()
		if _, err := h.client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: "w1", LoadAge: durationpb.New(age),
			Load: &workerv1.WorkerLoad{RunningRequests: running, ActiveKvBlocks: 11 * running, TotalKvBlocks: 1 << 16}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.client.Route(ctx, routeReq("r1", "s", 160)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("r1", "w1", "s", 160, 16)); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Second)
	beat(1500*time.Millisecond, 1) // sampled half a second before the finish
	if got := freed(); got != 1 {
		t.Fatalf("a sample older than the finish: %d freed taken out, want 1", got)
	}
	beat(500*time.Millisecond, 0) // sampled half a second after it
	if got := freed(); got != 0 {
		t.Fatalf("a sample newer than the finish: %d freed taken out, want 0", got)
	}
	if resp, err := h.client.Route(ctx, routeReq("r2", "s", 176)); err != nil || resp.GetWorkerId() != "w1" {
		t.Fatalf("r2: %v, %v; want w1", resp.GetWorkerId(), err)
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("r2", "w1", "s", 176, 16)); err != nil {
		t.Fatal(err)
	}
	lease := h.svc.cfg.LeaseTTL
	h.clock.Advance(lease * 6 / 10)
	beat(lease, 1) // sampled before r2's finish
	if got := freed(); got != 1 {
		t.Fatalf("a sample a lease old, older than the finish: %d freed taken out, want 1", got)
	}
	h.clock.Advance(lease * 6 / 10)
	beat(time.Hour, 1) // taken as a lease old: sampled after r2's finish
	if got := freed(); got != 0 {
		t.Fatalf("an age past the lease: %d freed taken out, want 0 (the age counts as a lease)", got)
	}
}
