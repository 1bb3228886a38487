package scheduler

import (
	"slices"
	"strings"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	"switchyard.dev/pkg/agentctx"
)

// What a turn's calls may carry. The ids become map keys of programs,
// bindings and the session ledger, and the tool names stay in the ledger's
// recent turns: unbounded, a few calls would hold memory and make the
// session views larger than a gRPC message. The frontend sends ids of at
// most agentctx.MaxIDBytes; the tool names are the model's, as it emitted
// them, so they are clipped, not refused: a finish refused would leave its
// turn's load and program in place.
const (
	maxToolNames     = 1024
	maxToolNameBytes = 256
)

// checkIDs refuses a turn's ids longer than agentctx.MaxIDBytes.
func checkIDs(requestID, workerID string, agent *agentv1.AgentContext) error {
	for _, f := range []struct{ name, v string }{
		{"request_id", requestID}, {"worker_id", workerID},
		{"agent.session_id", agent.GetSessionId()}, {"agent.parent_session_id", agent.GetParentSessionId()},
		{"agent.tenant", agent.GetTenant()}, {"agent.harness", agent.GetHarness()},
	} {
		if len(f.v) > agentctx.MaxIDBytes {
			return invalid("%s of %d bytes; at most %d", f.name, len(f.v), agentctx.MaxIDBytes)
		}
	}
	if strings.ContainsRune(agent.GetTenant(), 0) {
		// A NUL would split the tenant-scoped session key wrongly
		// (turns.SplitSessionKey).
		return invalid("agent.tenant holds a NUL")
	}
	return nil
}

// clipToolNames is names with at most maxToolNames names of at most
// maxToolNameBytes each (names itself when they are within both).
func clipToolNames(names []string) []string {
	if len(names) <= maxToolNames && !slices.ContainsFunc(names, func(n string) bool { return len(n) > maxToolNameBytes }) {
		return names
	}
	out := slices.Clone(names[:min(len(names), maxToolNames)])
	for i, n := range out {
		if len(n) > maxToolNameBytes {
			out[i] = strings.ToValidUTF8(n[:maxToolNameBytes], "")
		}
	}
	return out
}
