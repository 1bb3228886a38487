package frontend

import (
	"fmt"
	"net/http"
	"slices"

	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/trace"
)

// serveConsolePerfetto is GET /console/sessions/{tenant}/{session}/perfetto:
// the session and its sub-agents' recent turns (those among the tenant's
// latest consoleSessions) (what the schedulers keep of
// them) as a Perfetto trace, written by the same code as `switchyard trace
// perfetto` (trace.WritePerfetto) from the same records a request trace
// holds: a download for ui.perfetto.dev.
func (s *Service) serveConsolePerfetto(w http.ResponseWriter, r *http.Request) error {
	tenant, session := r.PathValue("tenant"), r.PathValue("session")
	if err := agentctx.ValidateID(session); err != nil {
		return badRequestf("session", "session: %v", err)
	}
	// The path names the tenant, which the key must see. A ?tenant= naming
	// another (an operator's narrowing, as for the state) contradicts it: a
	// 400 saying so, not a refusal of a key that may see both.
	if _, err := s.consoleTenant(r, tenant); err != nil {
		return err
	}
	if q := r.URL.Query().Get("tenant"); q != "" && q != tenant {
		return badRequestf("tenant", "?tenant=%q does not match tenant %q of the path", q, tenant)
	}
	// The session itself exactly, whenever it was last active; its
	// sub-agents among the tenant's latest sessions.
	root, err := s.fleetSessions(r.Context(), &schedulerv1.ListSessionsRequest{Tenant: tenant, SessionId: session, Limit: 1})
	if err != nil {
		return consoleUnavailable(r.Context(), err)
	}
	fleet, err := s.fleetSessions(r.Context(), &schedulerv1.ListSessionsRequest{Tenant: tenant, Limit: consoleSessions})
	if err != nil {
		return consoleUnavailable(r.Context(), err)
	}
	others := slices.DeleteFunc(fleet.sessions, func(u *frontendv1.Session) bool { return u.GetAgent().GetSessionId() == session })
	recs := sessionRecords(append(root.sessions, others...), session)
	if len(recs) == 0 {
		return &apiError{Status: http.StatusNotFound, Kind: "not_found_error", Message: fmt.Sprintf("session %q of tenant %q: no scheduler replica has a turn of it", session, tenant)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "session-"+session+".perfetto.json"))
	return trace.WritePerfetto(w, recs, trace.PerfettoOptions{})
}

// sessionRecords are the request-end records of root's recent turns and of
// its sub-agents' (transitively, among sessions).
func sessionRecords(sessions []*frontendv1.Session, root string) []trace.Record {
	tree := []string{root}
	for grew := true; grew; {
		grew = false
		for _, u := range sessions {
			a := u.GetAgent()
			if slices.Contains(tree, a.GetParentSessionId()) && !slices.Contains(tree, a.GetSessionId()) {
				tree, grew = append(tree, a.GetSessionId()), true
			}
		}
	}
	var recs []trace.Record
	for _, u := range sessions {
		a := u.GetAgent()
		if !slices.Contains(tree, a.GetSessionId()) {
			continue
		}
		for _, t := range u.GetRecentTurns() {
			recs = append(recs, turnRecord(a.GetSessionId(), a.GetParentSessionId(), t))
		}
	}
	return recs
}

func turnRecord(session, parent string, t *schedulerv1.TurnUsage) trace.Record {
	end := uint64(t.GetFinishedAt().AsTime().UnixMilli())
	total, ttft := t.GetTotalMs(), t.GetTtftMs()
	received := end - min(end, uint64(total))
	in, out, cached := uint64(t.GetPromptTokens()), uint64(t.GetCompletionTokens()), uint64(t.GetCachedTokens())
	q := &trace.RequestMetrics{
		RequestID: t.GetRequestId(), InputTokens: &in, OutputTokens: &out, CachedTokens: &cached,
		RequestReceivedMs: &received, TotalTimeMs: &total, Worker: &trace.WorkerInfo{WorkerName: t.GetWorkerId()},
		FinishReasonMetadata: &trace.FinishReasonMetadata{FinishReason: finishName(t.GetFinishReason()), ToolCalls: []trace.ToolCall{}},
	}
	if ttft > 0 {
		q.TTFTMs = &ttft
	}
	for i, name := range t.GetToolCallNames() {
		q.FinishReasonMetadata.ToolCalls = append(q.FinishReasonMetadata.ToolCalls, trace.ToolCall{ToolCallIndex: uint32(i), Name: name})
	}
	return trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd, EventTimeUnixMs: end, EventSource: "scheduler",
		AgentContext: &trace.AgentContext{SessionID: session, ParentSessionID: parent}, Request: q}
}
