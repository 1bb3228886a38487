package mesh_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"switchyard.dev/internal/mesh"
	"switchyard.dev/services/frontend"
	"switchyard.dev/services/frontend/console/consoletest"
)

// chatTurn is one answered turn: its response id, usage and answer.
type chatTurn struct {
	ID string `json:"id"`
	chatResponse
}

// postTurn sends a chat completion with the given headers and returns the
// answered turn, failing the test on anything but a 200.
func postTurn(t *testing.T, base string, headers map[string]string, body any) chatTurn {
	t.Helper()
	resp, out := postChatWith(t, base, headers, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat/completions: status %d: %s", resp.StatusCode, out)
	}
	var turn chatTurn
	if err := json.Unmarshal(out, &turn); err != nil || turn.ID == "" || len(turn.Choices) != 1 {
		t.Fatalf("bad chat completion %s (%v)", out, err)
	}
	return turn
}

func workerIDs(m *mesh.Mesh) []string {
	var ids []string
	for _, ep := range m.Endpoints {
		if ep.Service == "engine-shim" {
			ids = append(ids, ep.Name)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestConsoleShowsTheMesh is the console's end-to-end test (issue 20): two
// turns of a Claude Code session through the real mesh, then the console in
// headless Chromium shows the four workers and the session with both turns;
// a turn of its sub-agent sent while the page is open shows up live (the
// events stream), nested under the session; and the second turn's cached
// tokens are what the chat API reported. With CONSOLE_SCREENSHOTS set it
// saves a full-page screenshot there.
func TestConsoleShowsTheMesh(t *testing.T) {
	consoletest.Chromium(t) // skip (or fail in CI) before starting a mesh
	m := startMesh(t)
	base := "http://" + m.Endpoint("frontend").HTTP

	const root, agent = "e2e-console-session", "e2e-console-agent"
	rootHeaders := map[string]string{"X-Claude-Code-Session-Id": root}
	history := []message{
		{Role: "system", Content: "You are a careful coding agent. Read files before you change them, and explain every change you make in one short sentence."},
		{Role: "user", Content: "List the files of this repository and tell me which one starts the server."},
	}
	turn1 := postTurn(t, base, rootHeaders, map[string]any{"model": "switchyard-sim", "max_tokens": 24, "messages": history})
	history = append(history,
		message{Role: "assistant", Content: turn1.Choices[0].Message.Content},
		message{Role: "user", Content: "Now open that file and summarise what its main function does."})
	turn2 := postTurn(t, base, rootHeaders, map[string]any{"model": "switchyard-sim", "max_tokens": 24, "messages": history})
	cached := turn2.Usage.PromptTokensDetails.CachedTokens
	if cached == 0 {
		t.Fatalf("turn 2 hit no cache: the console check would prove nothing")
	}

	ctx := consoletest.Browser(t) // after the mesh: the browser closes first
	consoletest.Do(t, ctx, "open the console", chromedp.Navigate(base+"/console"))
	page := consoletest.WaitFor(t, ctx, "four workers and the session with two turns, live", func(p consoletest.Page) bool {
		s, ok := p.Session(root)
		return len(p.Workers) == 4 && ok && s.Turns == 2 && p.Live == "live"
	})
	if got, want := page.WorkerIDs(), workerIDs(m); !slices.Equal(got, want) {
		t.Errorf("worker cards %v, the mesh runs %v", got, want)
	}
	rootRow, _ := page.Session(root)
	if rootRow.Depth != 0 || rootRow.ParentID != "" || rootRow.Tenant != "anonymous" {
		t.Errorf("session row %+v: want an anonymous top-level session", rootRow)
	}

	// A sub-agent, while the page is open: Claude Code's agent id under
	// the root's session id.
	sub := postTurn(t, base, map[string]string{"X-Claude-Code-Session-Id": root, "X-Claude-Code-Agent-Id": agent},
		map[string]any{"model": "switchyard-sim", "max_tokens": 16, "messages": []message{
			{Role: "system", Content: "You are a sub-agent that explores a repository and reports back in one paragraph."},
			{Role: "user", Content: "Find where the HTTP server's routes are registered."},
		}})
	page = consoletest.WaitFor(t, ctx, "the sub-agent, live", func(p consoletest.Page) bool {
		_, ok := p.Session(agent)
		return ok
	})
	subRow, _ := page.Session(agent)
	if subRow.ParentID != root || subRow.Depth != 1 {
		t.Errorf("sub-agent row %+v: want it nested under %s", subRow, root)
	}
	if i, j := slices.IndexFunc(page.Sessions, func(s consoletest.Session) bool { return s.ID == root }),
		slices.IndexFunc(page.Sessions, func(s consoletest.Session) bool { return s.ID == agent }); j != i+1 {
		t.Errorf("the sub-agent is row %d, its parent row %d: want it right below", j, i)
	}

	consoletest.Click(t, ctx, "#expand-all")
	page = consoletest.WaitFor(t, ctx, "the turns of both sessions", func(p consoletest.Page) bool {
		_, ok1 := p.Turn(turn1.ID)
		_, ok2 := p.Turn(turn2.ID)
		_, ok3 := p.Turn(sub.ID)
		return ok1 && ok2 && ok3
	})
	if tr, _ := page.Turn(turn2.ID); tr.Cached != cached || tr.SessionID != root {
		t.Errorf("second turn %+v: the chat API reported %d cached tokens for it", tr, cached)
	}
	if tr, _ := page.Turn(turn1.ID); tr.SessionID != root {
		t.Errorf("first turn %+v: want it under %s", tr, root)
	}
	if tr, _ := page.Turn(sub.ID); tr.SessionID != agent {
		t.Errorf("sub-agent's turn %+v: want it under %s", tr, agent)
	}
	// The simulated engines report their evictions: every card shows a
	// count, and the cache section their sum.
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](
		`[...document.querySelectorAll('[data-testid="worker-evicted"], [data-testid="cache-evicted"]')].map(e => e.dataset.value)`))
	var evicted []string
	if err == nil {
		err = json.Unmarshal(raw, &evicted)
	}
	if err != nil || len(evicted) != 5 || slices.Contains(evicted, "") {
		t.Errorf("evicted blocks shown %q (%v): want a count on each of the 4 cards and in the cache totals", evicted, err)
	}
	consoletest.WaitFor(t, ctx, "the live indicator", func(p consoletest.Page) bool { return p.Live == "live" })
	consoletest.Screenshot(t, ctx, "mesh")
}

// TestConsoleShowsOnlyTheKeysTenant: with API keys the console asks for one,
// and a tenant's key shows that tenant's sessions only.
func TestConsoleShowsOnlyTheKeysTenant(t *testing.T) {
	consoletest.Chromium(t)
	m := startMesh(t, func(c *mesh.Config) {
		c.Frontend = func(fc *frontend.Config) { fc.APIKeys = map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"} }
	})
	base := "http://" + m.Endpoint("frontend").HTTP
	for key, session := range map[string]string{"key-a": "console-a", "key-b": "console-b"} {
		postTurn(t, base, map[string]string{"Authorization": "Bearer " + key, "x-dynamo-session-id": session},
			map[string]any{"model": "switchyard-sim", "max_tokens": 8, "messages": []message{{Role: "user", Content: "Say hello to " + session + "."}}})
	}

	ctx := consoletest.Browser(t)
	consoletest.Do(t, ctx, "open the console", chromedp.Navigate(base+"/console/"))
	page := consoletest.WaitFor(t, ctx, "the key-needed panel", func(p consoletest.Page) bool { return p.KeyNeeded })
	if page.Main || len(page.Sessions) != 0 {
		t.Errorf("the console shows data without a key: %+v", page)
	}
	consoletest.Do(t, ctx, "enter tenant A's key", chromedp.SendKeys(chromedp.CSS("#key-needed-input"), "key-a"))
	consoletest.Click(t, ctx, `#key-needed-form button[type="submit"]`)
	page = consoletest.WaitFor(t, ctx, "tenant A's session", func(p consoletest.Page) bool {
		_, ok := p.Session("console-a")
		return ok && len(p.Workers) == 4 && p.Live == "live"
	})
	for _, s := range page.Sessions {
		if s.Tenant != "tenant-a" {
			t.Errorf("tenant A's console shows %s of tenant %q", s.ID, s.Tenant)
		}
	}
	if !strings.Contains(page.Tenant, "tenant-a") {
		t.Errorf("tenant label %q, want tenant-a", page.Tenant)
	}
	consoletest.Screenshot(t, ctx, "tenant-a")
}
