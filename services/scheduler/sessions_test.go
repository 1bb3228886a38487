package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

func TestListSessions(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxSessions = 3 })
	ctx := context.Background()
	finish := func(req *schedulerv1.FinishRequestRequest) {
		t.Helper()
		if _, err := h.client.FinishRequest(ctx, req); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(time.Second)
	}
	list := func(req *schedulerv1.ListSessionsRequest) []*schedulerv1.SessionUsage {
		t.Helper()
		resp, err := h.client.ListSessions(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetSessions()
	}

	finish(finishReq("a1", "w1", "a", 100, 10))
	// a2 fails on w1 and moves to w2: its first attempt is superseded, and
	// the turn is its last attempt's.
	failed := finishReq("a2", "w1", "a", 150, 0)
	failed.WorkerFailed, failed.FinishReason, failed.Superseded = true, enginev1.FinishReason_FINISH_REASON_ABORT, true
	finish(failed)
	moved := finishReq("a2", "w2", "a", 150, 5)
	moved.Usage.CachedTokens, moved.TtftMs = 96, 12.5
	finish(moved)
	other := finishReq("b1", "w1", "a", 40, 4)
	other.Agent = &agentv1.AgentContext{SessionId: "a", Tenant: "u"} // same id, another tenant
	finish(other)

	got := list(&schedulerv1.ListSessionsRequest{Tenant: "t", SessionId: "a"})
	if len(got) != 1 {
		t.Fatalf("sessions %v", got)
	}
	s := got[0]
	if s.GetTotals().GetTurns() != 2 || s.GetTotals().GetPromptTokens() != 250 || s.GetTotals().GetCompletionTokens() != 15 || s.GetTotals().GetCachedTokens() != 96 ||
		s.GetLastWorkerId() != "w2" || s.GetAgent().GetTenant() != "t" ||
		!s.GetFirstSeen().AsTime().Equal(t0) || !s.GetLastSeen().AsTime().Equal(t0.Add(2*time.Second)) {
		t.Fatalf("session %v", s)
	}
	// The second turn could have found all the first left (110 tokens).
	if s.GetTotals().GetIdealCachedTokens() != 110 || len(s.GetRecentTurns()) != 2 {
		t.Fatalf("ideal %d, recent turns %v", s.GetTotals().GetIdealCachedTokens(), s.GetRecentTurns())
	}
	if r := s.GetRecentTurns()[1]; r.GetRequestId() != "a2" || r.GetWorkerId() != "w2" || r.GetCachedTokens() != 96 || r.GetTtftMs() != 12.5 ||
		r.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_TOOL_CALLS {
		t.Fatalf("second turn %v", r)
	}
	if got := list(&schedulerv1.ListSessionsRequest{SessionId: "a"}); len(got) != 2 || got[0].GetAgent().GetTenant() != "u" {
		t.Fatalf("both tenants' session a, most recent first: %v", got)
	}
	if got := list(&schedulerv1.ListSessionsRequest{Tenant: "u"}); len(got) != 1 || got[0].GetTotals().GetTurns() != 1 {
		t.Fatalf("tenant u: %v", got)
	}

	// Two more sessions: the bound of three forgets the least recently
	// active (t/a), and the limit cuts the rest.
	finish(finishReq("c1", "w1", "c", 10, 1))
	finish(finishReq("d1", "w1", "d", 10, 1))
	if got := list(&schedulerv1.ListSessionsRequest{Tenant: "t", SessionId: "a"}); len(got) != 0 {
		t.Fatalf("forgotten session still listed: %v", got)
	}
	all := list(&schedulerv1.ListSessionsRequest{})
	if len(all) != 3 || all[0].GetAgent().GetSessionId() != "d" || all[2].GetAgent().GetTenant() != "u" {
		t.Fatalf("all %v", all)
	}
	if got := list(&schedulerv1.ListSessionsRequest{Limit: 2}); len(got) != 2 || got[1].GetAgent().GetSessionId() != "c" {
		t.Fatalf("limit 2: %v", got)
	}
	// A session keeps its latest 32 turns.
	for i := range 40 {
		finish(finishReq(fmt.Sprint("e", i), "w1", "e", 10, 1))
	}
	e := list(&schedulerv1.ListSessionsRequest{Tenant: "t", SessionId: "e"})
	if len(e) != 1 || e[0].GetTotals().GetTurns() != 40 || len(e[0].GetRecentTurns()) != 32 || e[0].GetRecentTurns()[0].GetRequestId() != "e8" {
		t.Fatalf("session e: %v", e)
	}
	// The totals count every turn recorded, of sessions forgotten too.
	for tenant, want := range map[string]uint64{"t": 2 + 1 + 1 + 40, "u": 1, "": 45} {
		resp, err := h.client.ListSessions(ctx, &schedulerv1.ListSessionsRequest{Tenant: tenant, Limit: 1})
		if err != nil || resp.GetTotals().GetTurns() != want {
			t.Fatalf("tenant %q totals %v, want %d turns (%v)", tenant, resp.GetTotals(), want, err)
		}
	}
}

// A list answers at most maxListedSessions sessions, whatever the limit
// asked: it is copied under the lock every FinishRequest takes.
func TestListSessionsIsBounded(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	for i := range maxListedSessions + 1 {
		if _, err := h.client.FinishRequest(ctx, finishReq(fmt.Sprint("r", i), "w1", fmt.Sprint("s", i), 10, 1)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := h.client.ListSessions(ctx, &schedulerv1.ListSessionsRequest{Limit: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.GetSessions()); got != maxListedSessions {
		t.Errorf("a list asked for 5000 of %d sessions answered %d, want %d", maxListedSessions+1, got, maxListedSessions)
	}
}

// TestAdmissionUseTellsThePausedDemand: a replica's answer to its peers
// carries what its paused programs ask for, and how long the oldest has
// been paused, read back on the hearer's clock as the admission core's
// Demand.
func TestAdmissionUseTellsThePausedDemand(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	pausedSetup(t, h)
	resp, err := h.client.GetAdmissionUse(context.Background(), &schedulerv1.GetAdmissionUseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// small (2,000 tokens and the buffer) ran a turn and has none waiting.
	// Heard a minute later on another clock: the pause is as old.
	heardAt := h.clock.Now().Add(time.Minute)
	paused := demandFromProto(resp.GetPaused(), heardAt)
	if len(resp.GetWorkers()) != 1 || resp.GetWaiting().GetTokens() != 0 || paused.Tokens < 2_000 || !paused.Since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("use %v (paused %+v)", resp, paused)
	}
}

// A FinishRequest sent again for a turn already recorded (a retried call)
// is not a turn of its own: the session and the totals count it once.
func TestListSessionsCountsARepeatedFinishOnce(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	for _, req := range []*schedulerv1.FinishRequestRequest{
		finishReq("a1", "w1", "a", 100, 10),
		finishReq("a1", "w1", "a", 100, 10),
		finishReq("a2", "w1", "a", 150, 5),
		finishReq("a1", "w1", "a", 100, 10),
	} {
		if _, err := h.client.FinishRequest(ctx, req); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(time.Second)
	}
	resp, err := h.client.ListSessions(ctx, &schedulerv1.ListSessionsRequest{Tenant: "t", SessionId: "a"})
	if err != nil || len(resp.GetSessions()) != 1 {
		t.Fatalf("sessions %v (%v)", resp.GetSessions(), err)
	}
	s := resp.GetSessions()[0]
	if tot := s.GetTotals(); tot.GetTurns() != 2 || tot.GetPromptTokens() != 250 || tot.GetCompletionTokens() != 15 || len(s.GetRecentTurns()) != 2 ||
		!s.GetLastSeen().AsTime().Equal(t0.Add(2*time.Second)) {
		t.Fatalf("session %v", s)
	}
	if tot := resp.GetTotals(); tot.GetTurns() != 2 || tot.GetPromptTokens() != 250 {
		t.Fatalf("totals %v", tot)
	}
}
