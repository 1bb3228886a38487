package scheduler

import (
	"context"
	"testing"

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
