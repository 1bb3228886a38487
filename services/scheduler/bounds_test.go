package scheduler

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

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

// Ids longer than a session id may be are refused, at a worker's
// registration too; the model's tool names, which a finish carries as the
// model emitted them, are clipped instead, so that the turn still ends: kept
// whole in the session ledger, a few finishes held hundreds of megabytes and
// made the session views larger than a gRPC message.
func TestTurnCallsAreBounded(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	long := strings.Repeat("x", 257)
	route := routeReq("r1", long, 160)
	tenant := routeReq("r2", "s", 160)
	tenant.Agent = &agentv1.AgentContext{SessionId: "s", Tenant: long}
	nul := routeReq("r3", "s", 160)
	nul.Agent = &agentv1.AgentContext{SessionId: "s", Tenant: "a\x00b"}
	for name, call := range map[string]func() error{
		"a long session id": func() error { _, err := h.client.Route(ctx, route); return err },
		"a long tenant":     func() error { _, err := h.client.Route(ctx, tenant); return err },
		"a tenant with NUL": func() error { _, err := h.client.Route(ctx, nul); return err },
		"a long worker id":  func() error { _, err := h.client.FinishRequest(ctx, finishReq("r5", long, "s", 10, 1)); return err },
		"registering a long worker id": func() error {
			_, err := h.client.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: worker(long, 1<<20)})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}

	if _, err := h.client.Route(ctx, routeReq("r6", "s", 160)); err != nil {
		t.Fatal(err)
	}
	f := finishReq("r6", "w1", "s", 10, 1)
	f.ToolCallNames = append(make([]string, maxToolNames), strings.Repeat("n", maxToolNameBytes+1))
	f.ToolCallNames[0] = strings.Repeat("é", maxToolNameBytes) // clipped mid-rune: still UTF-8
	if _, err := h.client.FinishRequest(ctx, f); err != nil {
		t.Fatalf("a finish with the model's long tool names: %v", err)
	}
	if phase := h.program(t, "s").GetPhase().String(); !strings.HasSuffix(phase, "ACTING") {
		t.Errorf("the finished turn's program: %s, want ACTING", phase)
	}
	resp, err := h.client.ListSessions(ctx, &schedulerv1.ListSessionsRequest{})
	if err != nil || len(resp.GetSessions()) != 1 {
		t.Fatalf("sessions %v, %v", resp.GetSessions(), err)
	}
	names := resp.GetSessions()[0].GetRecentTurns()[0].GetToolCallNames()
	if len(names) != maxToolNames || len(names[0]) > maxToolNameBytes || !utf8.ValidString(names[0]) {
		t.Errorf("recorded %d tool names, the first of %d bytes; want %d, at most %d", len(names), len(names[0]), maxToolNames, maxToolNameBytes)
	}
}

// A turn of no session, finished with its tenant named, names no other
// session: no warning (every sessionless request of a keyed frontend had
// one).
func TestSessionlessFinishIsNoMismatch(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	var logs strings.Builder
	h.svc.log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	r := routeReq("r", "", 160)
	r.Agent = &agentv1.AgentContext{Tenant: "anonymous"}
	if _, err := h.client.Route(ctx, r); err != nil {
		t.Fatal(err)
	}
	f := finishReq("r", "w1", "", 160, 10)
	f.Agent = &agentv1.AgentContext{Tenant: "anonymous"}
	if _, err := h.client.FinishRequest(ctx, f); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "names another session") {
		t.Errorf("a sessionless finish was taken for another session's:\n%s", logs.String())
	}
}
