package scheduler

import (
	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	"switchyard.dev/pkg/agentctx"
)

// What a turn's calls may carry. The ids become map keys of programs,
// bindings and the session ledger, and the tool names stay in the ledger's
// recent turns: unbounded, a few calls would hold memory and make the
// session views larger than a gRPC message. The frontend sends ids of at
// most agentctx.MaxIDBytes and the tool calls of one turn.
const (
	maxToolNames     = 1024
	maxToolNameBytes = 256
)

// checkIDs refuses a turn's ids longer than agentctx.MaxIDBytes.
func checkIDs(requestID, workerID string, agent *agentv1.AgentContext) error {
	for _, f := range []struct{ name, v string }{
		{"request_id", requestID}, {"worker_id", workerID},
		{"agent.session_id", agent.GetSessionId()}, {"agent.parent_session_id", agent.GetParentSessionId()},
		{"agent.tenant", agent.GetTenant()},
	} {
		if len(f.v) > agentctx.MaxIDBytes {
			return invalid("%s of %d bytes; at most %d", f.name, len(f.v), agentctx.MaxIDBytes)
		}
	}
	return nil
}

// checkToolNames refuses more tool names than a turn makes calls, or one
// longer than a tool's name.
func checkToolNames(names []string) error {
	if len(names) > maxToolNames {
		return invalid("%d tool_call_names; at most %d", len(names), maxToolNames)
	}
	for i, n := range names {
		if len(n) > maxToolNameBytes {
			return invalid("tool_call_names[%d] of %d bytes; at most %d", i, len(n), maxToolNameBytes)
		}
	}
	return nil
}
