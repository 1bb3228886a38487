package replay

import (
	"strings"
	"testing"

	"switchyard.dev/pkg/trace"
)

// A draw names a sub-agent after its parent's name and its own id: once,
// for a recorded trace's tenant as without one (acme/s@7/agent_1 beside
// s@7/agent_1, where it was acme/s@7/acme/agent_1), and after a "/" even
// where the parent's id is a prefix of the sub-agent's (p@7/pq, where it
// was p@7q, a name a draw of a session "p" could hold too).
func TestSubAgentNames(t *testing.T) {
	var turns []recordedTurn
	for _, pair := range []struct{ tenant, parent, child string }{{"acme", "s", "agent_1"}, {"", "s", "agent_1"}, {"", "p", "pq"}} {
		// The parent's first turn, its sub-agent's, then the parent's
		// turn that waits for it.
		turns = append(turns, recordedTurn{pair.tenant, pair.parent, ""}, recordedTurn{pair.tenant, pair.child, pair.parent},
			recordedTurn{pair.tenant, pair.parent, ""})
	}
	w := recorded(t, turns)
	want := map[string]string{"acme/s": "agent_1", "s": "agent_1", "p": "pq"} // parent's trace id: the sub-agent's name
	seen := map[string]bool{}
	c := smallConfig(PolicyKV, 1, 2)
	c.OnTurn = func(tr TurnResult) {
		if tr.ParentSessionID == "" {
			return
		}
		traceID, _, _ := strings.Cut(tr.ParentSessionID, "@")
		if got := strings.TrimPrefix(tr.SessionID, tr.ParentSessionID+"/"); got != want[traceID] {
			t.Errorf("sub-agent %s of %s: named %q below its parent, want %q", tr.SessionID, tr.ParentSessionID, got, want[traceID])
		}
		seen[traceID] = true
	}
	run(t, w, c)
	for id := range want {
		if !seen[id] {
			t.Errorf("no sub-agent of %s ran", id)
		}
	}
}

// Two sub-agents of one parent whose names come out alike ("p/x", past the
// parent's "p/", and "x") stay two programs with requests of their own.
func TestSubAgentNamesNeverRepeat(t *testing.T) {
	var turns []recordedTurn
	for _, tenant := range []string{"", "acme"} {
		turns = append(turns, recordedTurn{tenant, "p", ""}, recordedTurn{tenant, "p/x", "p"}, recordedTurn{tenant, "x", "p"},
			recordedTurn{tenant, "p", ""})
	}
	w := recorded(t, turns)
	names := map[string]map[string]bool{} // parent's name: its sub-agents' names
	c := smallConfig(PolicyKV, 1, 2)
	c.OnTurn = func(tr TurnResult) {
		if tr.ParentSessionID != "" {
			if names[tr.ParentSessionID] == nil {
				names[tr.ParentSessionID] = map[string]bool{}
			}
			names[tr.ParentSessionID][tr.SessionID] = true
		}
	}
	run(t, w, c)
	if len(names) == 0 {
		t.Fatal("no sub-agent ran")
	}
	for parent, subs := range names {
		if len(subs) != 2 {
			t.Errorf("sub-agents of %s ran as %v, want two names", parent, subs)
		}
	}
}

// recordedTurn is one turn of a recorded trace: its tenant, session and
// parent session.
type recordedTurn struct{ tenant, session, parent string }

// recorded is the workload of a recorded trace of turns, a second apart.
func recorded(t *testing.T, turns []recordedTurn) *trace.Workload {
	t.Helper()
	var recs []trace.Record
	for i, r := range turns {
		at := uint64(1000 * i)
		recs = append(recs, trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd, EventTimeUnixMs: at + 100,
			AgentContext: &trace.AgentContext{Tenant: r.tenant, SessionID: r.session, ParentSessionID: r.parent},
			Request: &trace.RequestMetrics{RequestID: "r", RequestReceivedMs: trace.U64(at), TotalTimeMs: trace.F64(100), OutputTokens: trace.U64(4),
				Replay: &trace.Replay{TraceBlockSize: 16, InputLength: 40, InputSequenceHashes: []uint64{at + 1, at + 2}}}})
	}
	w, err := trace.DynamoWorkload(recs, "recorded")
	if err != nil {
		t.Fatal(err)
	}
	return w
}
