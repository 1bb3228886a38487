package scheduler

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// A finish ends the program of the session its turn was routed for, and is
// counted under it: one naming another session ended that one's turn while
// it still ran and left the routed program REASONING for good, its tokens
// held against its worker; one naming none ended nothing.
func TestFinishEndsTheRoutedSessionsTurn(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	for _, r := range []*schedulerv1.RouteRequest{routeReq("ra", "a", 160), routeReq("rb", "b", 160), routeReq("rc", "c", 160)} {
		if _, err := h.client.Route(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	wrong := finishReq("ra", "w1", "b", 160, 10)
	none := finishReq("rc", "w1", "", 160, 10)
	none.Agent = nil
	for _, f := range []*schedulerv1.FinishRequestRequest{wrong, none} {
		if _, err := h.client.FinishRequest(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	for session, want := range map[string]string{"a": "ACTING", "b": "REASONING", "c": "ACTING"} {
		if got := h.program(t, session).GetPhase().String(); !strings.HasSuffix(got, want) {
			t.Errorf("session %s: %s, want %s", session, got, want)
		}
	}
	resp, err := h.client.ListSessions(ctx, &schedulerv1.ListSessionsRequest{Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetSessions() {
		if id := s.GetAgent().GetSessionId(); id != "a" && id != "c" {
			t.Errorf("a turn counted under session %q: %v", id, s)
		}
	}
}

// Ids longer than a session id may be, and more or longer tool names than
// a turn's calls, are refused: they are kept in the programs and the session
// ledger, where a few calls held hundreds of megabytes and made the session
// views larger than a gRPC message.
func TestTurnCallsAreBounded(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	long := strings.Repeat("x", 257)
	route := routeReq("r1", long, 160)
	tenant := routeReq("r2", "s", 160)
	tenant.Agent = &agentv1.AgentContext{SessionId: "s", Tenant: long}
	many := finishReq("r3", "w1", "s", 10, 1)
	many.ToolCallNames = make([]string, maxToolNames+1)
	longName := finishReq("r4", "w1", "s", 10, 1)
	longName.ToolCallNames = []string{"Bash", strings.Repeat("n", maxToolNameBytes+1)}
	for name, call := range map[string]func() error{
		"a long session id":   func() error { _, err := h.client.Route(ctx, route); return err },
		"a long tenant":       func() error { _, err := h.client.Route(ctx, tenant); return err },
		"a long worker id":    func() error { _, err := h.client.FinishRequest(ctx, finishReq("r5", long, "s", 10, 1)); return err },
		"too many tool names": func() error { _, err := h.client.FinishRequest(ctx, many); return err },
		"a long tool name":    func() error { _, err := h.client.FinishRequest(ctx, longName); return err },
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if resp, _ := h.client.ListSessions(ctx, &schedulerv1.ListSessionsRequest{}); len(resp.GetSessions()) != 0 {
		t.Errorf("refused finishes recorded: %d turns", resp.GetSessions()[0].GetTotals().GetTurns())
	}
}
