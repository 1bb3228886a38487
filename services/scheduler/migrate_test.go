package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
)

// TestRouteExcludeWorkers: a Route excluding workers (the frontend
// migrating a turn that failed before its first token) never lands on one,
// under every policy, even where the session's program or binding is there;
// excluding every live worker is FAILED_PRECONDITION (not UNAVAILABLE, which
// the frontend waits out as an outage: the turn's last failure is its
// answer), and the program is not left holding the turn.
func TestRouteExcludeWorkers(t *testing.T) {
	for _, policy := range []string{"round_robin", "least_loaded", "kv", "kv_affinity", "session_aware"} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Policy = policy })
			h.register(t, worker("w1", 1<<20), worker("w2", 1<<20), worker("w3", 1<<20))
			ctx := context.Background()
			for i := range 12 {
				// A session's turn on its worker, then the same turn again,
				// as the frontend migrates it.
				id := fmt.Sprint("r", i)
				first, err := h.client.Route(ctx, routeReq(id, "s", 160))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.client.FinishRequest(ctx, finishReq(id, first.GetWorkerId(), "s", 160, 0)); err != nil {
					t.Fatal(err)
				}
				exclude := []string{first.GetWorkerId()}
				if i%2 == 1 {
					exclude = append(exclude, "w1", "gone")
				}
				req := routeReq(id, "s", 160)
				req.ExcludeWorkers = exclude
				again, err := h.client.Route(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(exclude, again.GetWorkerId()) {
					t.Fatalf("turn %d excluding %v routed to %s", i, exclude, again.GetWorkerId())
				}
				if policy == "session_aware" {
					if w := h.program(t, "s").GetWorkerId(); w != again.GetWorkerId() {
						t.Fatalf("program on %s, want it moved to %s", w, again.GetWorkerId())
					}
				}
				if _, err := h.client.FinishRequest(ctx, finishReq(id, again.GetWorkerId(), "s", 160, 8)); err != nil {
					t.Fatal(err)
				}
			}

			req := routeReq("all", "s", 160)
			req.ExcludeWorkers = []string{"w3", "w1", "w2"}
			if _, err := h.client.Route(ctx, req); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("excluding every worker: %v, want FailedPrecondition", err)
			}
			if n := h.svc.pipe.Router().Load().Len(); n != 0 {
				t.Errorf("%d requests hold load after the refused route", n)
			}
			if policy == "session_aware" {
				// The refused turn was handed back: the program is between
				// turns again, not waiting on one that never runs.
				if p := h.program(t, "s"); p.GetPhase() != schedulerv1.ProgramPhase_PROGRAM_PHASE_ACTING {
					t.Errorf("program %v after the refused route, want ACTING", p)
				}
			}
		})
	}
}

func (h *harness) program(t *testing.T, session string) *schedulerv1.Program {
	t.Helper()
	p, err := h.client.GetProgram(context.Background(), &schedulerv1.GetProgramRequest{SessionId: session, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return p.GetProgram()
}

// TestAbortedAttemptIsNoStep: a FinishRequest with reason ABORT and no
// completion (a worker that failed before the first token) frees the load
// without counting a step of the session; a real finish counts one.
func TestAbortedAttemptIsNoStep(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	if _, err := h.client.Route(ctx, routeReq("a1", "s", 160)); err != nil {
		t.Fatal(err)
	}
	abort := finishReq("a1", "w1", "s", 160, 0)
	abort.FinishReason = enginev1.FinishReason_FINISH_REASON_ABORT
	if _, err := h.client.FinishRequest(ctx, abort); err != nil {
		t.Fatal(err)
	}
	steps := func() int {
		h.svc.mu.Lock()
		defer h.svc.mu.Unlock()
		p, _ := h.svc.ctrl.Get(admission.Key{Tenant: "t", SessionID: "s"})
		return p.StepCount
	}
	if n := steps(); n != 0 || h.svc.pipe.Router().Load().Len() != 0 {
		t.Fatalf("after an aborted attempt: %d steps, %d requests loaded", n, h.svc.pipe.Router().Load().Len())
	}
	if _, err := h.client.Route(ctx, routeReq("a2", "s", 160)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("a2", "w1", "s", 160, 8)); err != nil {
		t.Fatal(err)
	}
	if n := steps(); n != 1 {
		t.Fatalf("after a finish: %d steps, want 1", n)
	}
}
