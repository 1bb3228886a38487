package mesh_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	kvhintv1 "switchyard.dev/gen/switchyard/kvhint/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	"switchyard.dev/internal/mesh"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/services/frontend"
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

	// Beyond the frontend and scheduler a session is named by its tenant
	// and id (agentctx.Scope); without keys every client is anonymous.
	idx := sessionindexv1.NewSessionPrefixIndexerServiceClient(dial(t, m.Endpoint("session-prefix-indexer").GRPC))
	scopedRoot, scopedAgent := agentctx.Scope(frontend.AnonymousTenant, root), agentctx.Scope(frontend.AnonymousTenant, agent)
	parent := func(session string) string {
		resp, err := idx.GetSessionLineage(context.Background(), &sessionindexv1.GetSessionLineageRequest{SessionId: session})
		if err != nil {
			t.Fatalf("GetSessionLineage(%s): %v", session, err)
		}
		return resp.GetParentSessionId()
	}
	if !servicetest.Poll(servicetest.Patience, func() bool { return parent(scopedAgent) == scopedRoot }) {
		t.Fatalf("the lineage index gives %s the parent %q, want %q", scopedAgent, parent(scopedAgent), scopedRoot)
	}
	if p := parent(scopedRoot); p != "" {
		t.Errorf("the root session has the parent %q, want none", p)
	}
}

// TestTenantsSessionsStayApartBeyondTheScheduler: two tenants using the same
// session id (and one naming the other's session as its parent) stay two
// sessions where the mesh names sessions outside the frontend and scheduler:
// the lineage index keeps each tenant's chain apart, and the hint emitter's
// release of one tenant's finished session names that tenant's alone, so
// no tenant can make an engine drop another's KV by reusing its session id.
func TestTenantsSessionsStayApartBeyondTheScheduler(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) {
		c.Policy, c.Workers = "session_aware", 1
		c.Frontend = func(fc *frontend.Config) { fc.APIKeys = map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"} }
	})
	base := "http://" + m.Endpoint("frontend").HTTP
	const shared = "shared-session"
	ask := func(headers map[string]string, content string) {
		postTurn(t, base, headers, map[string]any{"model": "switchyard-sim", "max_tokens": 4, "messages": []message{
			{Role: "user", Content: strings.Repeat(content, 20)}}})
	}
	ask(map[string]string{"Authorization": "Bearer key-a", "X-Dynamo-Session-Id": shared}, "Tenant A's own long prompt. ")
	ask(map[string]string{"Authorization": "Bearer key-b", "X-Dynamo-Session-Id": shared, "X-Dynamo-Parent-Session-Id": "a-parent",
		"X-Dynamo-Session-Final": "true"}, "Tenant B's other prompt. ")

	idx := sessionindexv1.NewSessionPrefixIndexerServiceClient(dial(t, m.Endpoint("session-prefix-indexer").GRPC))
	lineage := func(session string) *sessionindexv1.GetSessionLineageResponse {
		resp, _ := idx.GetSessionLineage(context.Background(), &sessionindexv1.GetSessionLineageRequest{SessionId: session})
		return resp
	}
	a, b := agentctx.Scope("tenant-a", shared), agentctx.Scope("tenant-b", shared)
	if !servicetest.Poll(servicetest.Patience, func() bool { return len(lineage(a).GetLineages()) > 0 && len(lineage(b).GetLineages()) > 0 }) {
		t.Fatalf("the lineage index does not know both tenants' sessions: %v, %v", lineage(a), lineage(b))
	}
	if la := lineage(a); len(la.GetLineages()) != 1 || la.GetParentSessionId() != "" {
		t.Errorf("tenant A's session: %d chains, parent %q; want its one chain and no parent", len(la.GetLineages()), la.GetParentSessionId())
	}
	if lb := lineage(b); len(lb.GetLineages()) != 1 || lb.GetParentSessionId() != agentctx.Scope("tenant-b", "a-parent") {
		t.Errorf("tenant B's session: %d chains, parent %q; want its one chain and tenant B's parent", len(lb.GetLineages()), lb.GetParentSessionId())
	}

	hints := kvhintv1.NewKvHintEmitterServiceClient(dial(t, m.Endpoint("kvhint-emitter").GRPC))
	released := func() []string {
		resp, err := hints.ListRecentHints(context.Background(), &kvhintv1.ListRecentHintsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range resp.GetHints() {
			if r := h.GetAction().GetReleaseSession(); r != nil {
				out = append(out, r.GetSessionId())
			}
		}
		return out
	}
	if !servicetest.Poll(servicetest.Patience, func() bool { return len(released()) > 0 }) {
		t.Fatal("tenant B's final turn released no session")
	}
	if got := released(); !slices.Equal(got, []string{b}) {
		t.Errorf("released %q, want tenant B's session %q alone", got, b)
	}
}
