package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
// waits: another session's, a sibling with the same prompt, a turn with
// another prompt and the same request routed again (a migration carrying
// the tokens sent so far) go at once; and a finish that never comes holds
// one turn only for the bound, after which no turn waits for it.
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
		routeReq("r5", "s", 80),  // a shorter prompt
		routeReq("r4", "s", 480), // r4 again, longer, on r4's old chain's blocks
	} {
		if req.GetRequestId() == "r4" && len(req.GetBlockHashes()) == 30 {
			copy(req.BlockHashes, other.BlockHashes)
		}
		if _, err := h.client.Route(ctx, req); err != nil {
			t.Fatalf("%s: %v", req.GetRequestId(), err)
		}
	}
	if n := testutil.CollectAndCount(h.svc.metrics.predecessorWaits); n != 0 {
		t.Fatalf("%d waits", n)
	}

	h.svc.preds.wait = 20 * time.Millisecond
	for i, id := range []string{"r6", "r7"} {
		start := time.Now()
		resp, err := h.client.Route(ctx, routeReq(id, "s", 320))
		if err != nil || resp.GetWorkerId() != "w1" {
			t.Fatalf("route %v %v", resp, err)
		}
		waited := time.Since(start)
		switch {
		case i == 0 && waited < 20*time.Millisecond:
			t.Fatalf("routed after %v, before the bound", waited)
		case i == 1 && waited >= 20*time.Millisecond:
			t.Fatalf("routed after %v: waited again for a finish taken as lost", waited)
		}
	}
	if n := testutil.ToFloat64(h.svc.metrics.predecessorWaits.WithLabelValues("gave_up")); n != 1 {
		t.Fatalf("%v waits given up", n)
	}
}

// afterAnUnfinishedTurn routes session s's turn r1 on one worker and makes
// the wait for a turn's unfinished predecessor a minute long; it returns
// the context of a caller that gives up after 50 ms, so that the next turn
// (r2, which extends r1) waits until its caller leaves.
func afterAnUnfinishedTurn(t *testing.T, h *harness) context.Context {
	t.Helper()
	h.register(t, worker("w1", 1<<20))
	if _, err := h.client.Route(context.Background(), routeReq("r1", "s", 160)); err != nil {
		t.Fatal(err)
	}
	h.svc.preds.wait = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// A turn whose caller gives up stops waiting.
func TestPredecessorWaitEndsWithTheCaller(t *testing.T) {
	h := newHarness(t, nil)
	ctx := afterAnUnfinishedTurn(t, h)
	if _, err := h.client.Route(ctx, routeReq("r2", "s", 320)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a route past its deadline: %v", err)
	}
	// The scheduler's side of the call stopped waiting too.
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(h.svc.metrics.predecessorWaits.WithLabelValues("gave_up")) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the route still waits for its predecessor after its caller left")
		}
	}
}

// A route whose caller left while it waited (here for its predecessor,
// under a policy that asks no indexer, which would have noticed) is not
// placed: nobody would finish it, and its load and program would stay
// until the stale sweep.
func TestRouteWhoseCallerLeftIsNotPlaced(t *testing.T) {
	for _, policy := range []string{"round_robin", "session_aware"} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Policy = policy })
			ctx := afterAnUnfinishedTurn(t, h)
			// In process, so that the call returns when the scheduler's side is done.
			if resp, err := h.svc.Route(ctx, routeReq("r2", "s", 320)); status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("a route past its deadline: %v %v", resp, err)
			}
			if _, placed := h.svc.pipe.Router().Load().RequestWorker("r2"); placed {
				t.Fatal("a route whose caller left was placed")
			}
			// Under session_aware, r1's alone is in flight.
			if prog, ok := h.svc.ctrl.Get(admission.Key{Tenant: "t", SessionID: "s"}); ok && prog.InFlight != 1 {
				t.Fatalf("program has %d turns in flight, want r1's alone", prog.InFlight)
			}
		})
	}
}

// The tracker forgets what finished, was placed again, failed to be
// placed again, or went unfinished for the stale age.
func TestPredecessorsForgetWhatEnded(t *testing.T) {
	p := newPredecessors()
	key := admission.Key{Tenant: "t", SessionID: "s"}
	p.routed("a", key, 160, hashes(10))
	p.routed("a", key, 160, hashes(10)) // placed again: replaces
	p.routed("b", key, 320, hashes(20))
	p.routed("c", key, 480, hashes(30))
	if got := len(p.extended("d", key, 640, hashes(40))); got != 3 {
		t.Fatalf("%d predecessors of a longer turn, want 3", got)
	}
	p.finished("a")
	p.finished("b")
	p.finished("b") // twice: harmless
	if len(p.byID) != 1 {
		t.Fatalf("%d turns left, want c's", len(p.byID))
	}
	p.finished("c") // swept stale by the router (tick)
	if len(p.byID) != 0 || len(p.bySession) != 0 {
		t.Fatalf("left %d turns, %d sessions", len(p.byID), len(p.bySession))
	}
}

// A request placed again that cannot be placed (its exclusions leave no
// worker) is no longer waited for: Place ended its earlier attempt.
func TestFailedPlaceAgainEndsThePredecessor(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, worker("w1", 1<<20))
	ctx := context.Background()
	if _, err := h.client.Route(ctx, routeReq("r1", "s", 160)); err != nil {
		t.Fatal(err)
	}
	again := routeReq("r1", "s", 160)
	again.ExcludeWorkers = []string{"w1"}
	if _, err := h.client.Route(ctx, again); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("placing again with every worker excluded: %v", err)
	}
	h.svc.preds.mu.Lock()
	left := len(h.svc.preds.byID)
	h.svc.preds.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d turns still waited for", left)
	}
}
