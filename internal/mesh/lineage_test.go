package mesh_test

import (
	"context"
	"testing"

	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	"switchyard.dev/internal/mesh"
	"switchyard.dev/services/servicekit/servicetest"
)

// TestSubAgentParentReachesTheLineageIndex: a sub-agent's turn through the
// real mesh makes the session-prefix indexer know its parent, under kv (no
// admission, so no program table: the route decision brings it) and under
// session_aware (the program watch, asked for new programs only, brings it
// too), and the parent's later turns change nothing of it.
func TestSubAgentParentReachesTheLineageIndex(t *testing.T) {
	for _, policy := range []string{"kv", "session_aware"} {
		t.Run(policy, func(t *testing.T) { subAgentParent(t, policy) })
	}
}

func subAgentParent(t *testing.T, policy string) {
	m := startMesh(t, func(c *mesh.Config) { c.Policy = policy })
	base := "http://" + m.Endpoint("frontend").HTTP
	const root, agent = "e2e-lineage-session", "e2e-lineage-agent"
	ask := func(headers map[string]string, content string) {
		postTurn(t, base, headers, map[string]any{"model": "switchyard-sim", "max_tokens": 8, "messages": []message{
			{Role: "system", Content: "You are a coding agent working in a small Go repository."},
			{Role: "user", Content: content},
		}})
	}
	ask(map[string]string{"X-Claude-Code-Session-Id": root}, "Read the README and say what the project does.")
	ask(map[string]string{"X-Claude-Code-Session-Id": root, "X-Claude-Code-Agent-Id": agent}, "Find every test file and count them.")
	ask(map[string]string{"X-Claude-Code-Session-Id": root}, "Now summarise the sub-agent's findings.")

	idx := sessionindexv1.NewSessionPrefixIndexerServiceClient(dial(t, m.Endpoint("session-prefix-indexer").GRPC))
	parent := func(session string) string {
		resp, err := idx.GetSessionLineage(context.Background(), &sessionindexv1.GetSessionLineageRequest{SessionId: session})
		if err != nil {
			t.Fatalf("GetSessionLineage(%s): %v", session, err)
		}
		return resp.GetParentSessionId()
	}
	if !servicetest.Poll(servicetest.Patience, func() bool { return parent(agent) == root }) {
		t.Fatalf("the lineage index gives %s the parent %q, want %q", agent, parent(agent), root)
	}
	if p := parent(root); p != "" {
		t.Errorf("the root session has the parent %q, want none", p)
	}
}
