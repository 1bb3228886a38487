package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
)

// routeOutcome is a Route's outcome, from a goroutine.
type routeOutcome struct {
	resp *schedulerv1.RouteResponse
	err  error
}

func (h *harness) routeAsync(req *schedulerv1.RouteRequest) <-chan routeOutcome {
	out := make(chan routeOutcome, 1)
	go func() {
		resp, err := h.client.Route(context.Background(), req)
		out <- routeOutcome{resp, err}
	}()
	return out
}

// chosen is the chosen worker's score in a route's answer.
func chosen(t *testing.T, resp *schedulerv1.RouteResponse) *schedulerv1.WorkerScore {
	t.Helper()
	for _, sc := range resp.GetScores() {
		if sc.GetChosen() {
			return sc
		}
	}
	t.Fatalf("no chosen score in %v", resp)
	return nil
}

// A session's next turn that overtakes its previous turn's finish (the
// finish is a notice; the next turn may come through another frontend)
// waits for it, and is routed with the previous turn's load gone.
func TestNextTurnWaitsForThePreviousTurnsFinish(t *testing.T) {
	h := newHarness(t, nil)
	h.svc.preds.wait = time.Minute // the finish decides, not the bound
	h.register(t, worker("w1", 1<<20), worker("w2", 1<<20))
	h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w2", DeviceBlocks: 10})
	ctx := context.Background()
	first, err := h.client.Route(ctx, routeReq("r1", "s", 160))
	if err != nil || first.GetWorkerId() != "w2" {
		t.Fatalf("first turn: %v %v", first, err)
	}

	next := h.routeAsync(routeReq("r2", "s", 320)) // r1's prompt and more
	select {
	case r := <-next:
		t.Fatalf("the next turn was routed before the previous one finished: %v %v", r.resp, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("r1", "w2", "s", 160, 20)); err != nil {
		t.Fatal(err)
	}
	r := <-next
	if r.err != nil || r.resp.GetWorkerId() != "w2" {
		t.Fatalf("next turn: %v %v", r.resp, r.err)
	}
	if n := chosen(t, r.resp).GetActiveRequests(); n != 0 {
		t.Fatalf("the next turn was routed with %d other requests on its worker: the previous turn's still counted", n)
	}
	if n := testutil.ToFloat64(h.svc.metrics.predecessorWaits.WithLabelValues("finished")); n != 1 {
		t.Fatalf("%v waits counted as finished", n)
	}
}

// Only a turn that holds the unfinished turn's whole prompt and more
// waits: another session's, a sibling with the same prompt and a turn
// with another prompt go at once; and a finish that never comes holds the
// turn only for the bound.
func TestOnlyAnExtendingTurnWaitsAndNotForever(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, worker("w1", 1<<20))
	ctx := context.Background()
	if _, err := h.client.Route(ctx, routeReq("r1", "s", 160)); err != nil {
		t.Fatal(err)
	}
	h.svc.preds.wait = time.Minute
	other := routeReq("r4", "s", 320)
	for i := 3; i < len(other.BlockHashes); i++ {
		other.BlockHashes[i] += 1 << 40 // diverges inside r1's prompt (a chain differs from there on)
	}
	// In this order: none holds the whole prompt of one routed before it.
	for _, req := range []*schedulerv1.RouteRequest{
		routeReq("r2", "t", 320), // another session
		routeReq("r3", "s", 160), // the same prompt
		other,
		routeReq("r5", "s", 80), // a shorter prompt
	} {
		if _, err := h.client.Route(ctx, req); err != nil {
			t.Fatalf("%s: %v", req.GetRequestId(), err)
		}
	}
	if n := testutil.CollectAndCount(h.svc.metrics.predecessorWaits); n != 0 {
		t.Fatalf("%d waits", n)
	}

	h.svc.preds.wait = 20 * time.Millisecond
	start := time.Now()
	resp, err := h.client.Route(ctx, routeReq("r6", "s", 320))
	if err != nil || resp.GetWorkerId() != "w1" {
		t.Fatalf("route %v %v", resp, err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("routed after %v, before the bound", waited)
	}
	if n := testutil.ToFloat64(h.svc.metrics.predecessorWaits.WithLabelValues("gave_up")); n != 1 {
		t.Fatalf("%v waits given up", n)
	}
}

// The tracker forgets what finished, was placed again or swept.
func TestPredecessorsForgetWhatEnded(t *testing.T) {
	p := newPredecessors()
	key := admission.Key{Tenant: "t", SessionID: "s"}
	p.routed("a", key, 160, hashes(10))
	p.routed("a", key, 160, hashes(10)) // placed again: replaces
	p.routed("b", key, 320, hashes(20))
	if got := len(p.extended("c", key, 480, hashes(30))); got != 2 {
		t.Fatalf("%d predecessors of a longer turn, want 2", got)
	}
	p.finished("a")
	p.finished("b")
	p.finished("b") // twice: harmless
	if len(p.byID) != 0 || len(p.bySession) != 0 {
		t.Fatalf("left %d turns, %d sessions", len(p.byID), len(p.bySession))
	}
}
