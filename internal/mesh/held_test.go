package mesh_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/internal/mesh"
	"switchyard.dev/services/frontend"
	"switchyard.dev/services/scheduler"
	"switchyard.dev/services/servicekit/servicetest"
)

// TestHeldFromIndexInTheMesh: with --held-from-index the scheduler asks the
// flash indexer, at each tick, what an idle program still holds, by its
// latest prompt's last block; the real indexer, fed by the real engine's KV
// events, finds the chain and says the program holds its whole prompt, so
// it counts its whole working set. A second session's long prompt on the
// one small worker then evicts most of it, and the next answer says so.
func TestHeldFromIndexInTheMesh(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) {
		c.Workers = 1
		c.GPUBlocks = 96
		c.Policy = "session_aware"
		c.Scheduler = func(c *scheduler.Config) {
			c.Admission.HeldFromIndex = true
			c.Admission.TickInterval = 50 * time.Millisecond
			c.Admission.ResidentRetention = 0 // let the engine's LRU evict the idle program
		}
	})
	base := "http://" + m.Endpoint("frontend").HTTP
	programs := schedulerv1.NewSchedulerServiceClient(dial(t, m.Endpoint("scheduler").GRPC))
	held := func(session string) (*schedulerv1.Program, bool) {
		t.Helper()
		resp, err := programs.GetProgram(context.Background(), &schedulerv1.GetProgramRequest{SessionId: session, Tenant: frontend.AnonymousTenant})
		if err != nil {
			t.Fatalf("GetProgram %s: %v", session, err)
		}
		return resp.GetProgram(), resp.GetProgram().HeldTokens != nil
	}
	turn := func(session, line string, lines int) {
		t.Helper()
		prompt := strings.Repeat(line, lines)
		resp, body := postChat(t, base, session, map[string]any{"model": "switchyard-sim", "max_tokens": 4,
			"messages": []message{{Role: "user", Content: prompt}}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", session, resp.StatusCode, body)
		}
	}

	turn("held-a", "tool output line ", 120)
	var p *schedulerv1.Program
	servicetest.Eventually(t, "the index answers about the idle program", func() bool {
		var ok bool
		p, ok = held("held-a")
		return ok
	})
	if p.GetHeldTokens() != p.GetTokenTotal() || p.GetTokenTotal() == 0 {
		t.Fatalf("just after its turn the program holds %d of %d tokens, want all", p.GetHeldTokens(), p.GetTokenTotal())
	}
	whole := p.GetTokenTotal()

	turn("held-b", "another file read ", 450) // more than the worker's KV keeps beside held-a's
	servicetest.Eventually(t, "the index says the evicted program holds less", func() bool {
		p, ok := held("held-a")
		return ok && p.GetHeldTokens() < whole
	})
}
