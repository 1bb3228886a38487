package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/chat"
	"switchyard.dev/services/servicekit"
)

// agentTurns is a session's growing conversation: turn n resends every
// earlier message, the answers included.
func agentTurns(t *testing.T, m *mesh, turns int, between func(turn int)) []string {
	t.Helper()
	msgs := []map[string]string{{"role": "system", "content": strings.Repeat("You are a careful coding agent. ", 40)}}
	var answers []string
	for turn := range turns {
		if between != nil {
			between(turn)
		}
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("Step %d: %s", turn, strings.Repeat("read the next file; ", 20))})
		body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 30, "messages": msgs})
		resp := postOK(t, m.url+"/v1/chat/completions", string(body), "x-session-id", "ses_base")
		var c chat.ChatCompletion
		if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &c); err != nil {
			t.Fatal(err)
		}
		m.waitFinish(t)
		answer := *c.Choices[0].Message.Content
		answers = append(answers, answer)
		msgs = append(msgs, map[string]string{"role": "assistant", "content": answer})
	}
	return answers
}

// sameAnswers runs four agent turns through plain and through based,
// calling forget before based's last turn, and checks that both answered
// alike.
func sameAnswers(t *testing.T, plain, based *mesh, forget func()) {
	t.Helper()
	want := agentTurns(t, plain, 4, nil)
	got := agentTurns(t, based, 4, func(turn int) {
		if turn == 3 {
			forget()
		}
	})
	if !slices.Equal(got, want) {
		t.Fatalf("answers %q, want %q", got, want)
	}
}

// A worker whose shim keeps prompts is sent, from a session's second turn
// on, only what follows the previous prompt; with the base put back the
// worker sees exactly the prompts a shim that keeps nothing is sent whole.
// A base the shim has forgotten is answered NOT_FOUND and the same worker is
// sent the whole prompt.
func TestPromptBaseSendsOnlyWhatTheWorkerHasNotSeen(t *testing.T) {
	plain := newMesh(t, nil)
	based := newMesh(t, func(_ *Config, f *fakeShim) { f.keep = true })
	sameAnswers(t, plain, based, func() {
		based.shim.mu.Lock()
		based.shim.kept = nil // the shim restarted
		based.shim.mu.Unlock()
	})

	sent, wholes := based.shim.requests(), plain.shim.requests()
	based.shim.mu.Lock()
	seen := slices.Clone(based.shim.wholes)
	based.shim.mu.Unlock()
	// Turn 3 was tried with its base, refused, and sent again whole.
	if len(sent) != 5 || len(seen) != 4 || len(wholes) != 4 {
		t.Fatalf("%d requests sent, %d answered; %d without bases", len(sent), len(seen), len(wholes))
	}
	for i, w := range wholes {
		if !slices.Equal(seen[i].GetTokenIds(), w.GetTokenIds()) || !slices.Equal(seen[i].GetBlockHashes(), w.GetBlockHashes()) {
			t.Fatalf("turn %d: the prompt the worker saw differs from the whole one (%d tokens, want %d)", i, len(seen[i].GetTokenIds()), len(w.GetTokenIds()))
		}
	}
	for i, r := range sent {
		wantBase := i == 1 || i == 2 || i == 3 // turn 4's first try named the forgotten base
		if (r.GetBase() != nil) != wantBase {
			t.Fatalf("request %d: base %v", i, r.GetBase())
		}
		if wantBase && len(r.GetTokenIds()) >= len(wholes[min(i, 3)].GetTokenIds())/2 {
			t.Fatalf("request %d sent %d of its %d tokens", i, len(r.GetTokenIds()), len(wholes[min(i, 3)].GetTokenIds()))
		}
	}
	if s, n := testutil.ToFloat64(based.svc.metrics.bases.WithLabelValues("sent")), testutil.ToFloat64(based.svc.metrics.bases.WithLabelValues("not_held")); s != 3 || n != 1 {
		t.Fatalf("prompt_bases_total sent %v, not_held %v; want 3 and 1", s, n)
	}
	if got := testutil.ToFloat64(plain.svc.metrics.bases.WithLabelValues("sent")); got != 0 {
		t.Fatalf("a shim that keeps nothing was sent %v bases", got)
	}
}

// A scheduler that keeps chains is sent, from a session's second turn on,
// only the block hashes that follow the previous turn's chain; expanded, its
// routes see exactly the chains a scheduler that keeps none is sent whole.
// A base the scheduler does not hold (it forgot it, or another replica
// routed the session's previous turn) is answered NOT_FOUND and the chain is
// sent again whole.
func TestChainBaseSendsOnlyTheNewHashes(t *testing.T) {
	plain := newMesh(t, nil)
	based := newMesh(t, nil)
	based.sched.chains = basecache.NewChains(1 << 20)
	sameAnswers(t, plain, based, func() {
		based.sched.mu.Lock()
		based.sched.chains = basecache.NewChains(1 << 20) // the replica restarted
		based.sched.mu.Unlock()
	})
	sent, wholes := based.sched.routeCalls(), plain.sched.routeCalls()
	based.sched.mu.Lock()
	seen := slices.Clone(based.sched.wholes)
	based.sched.mu.Unlock()
	// Turn 3 was tried with its base, refused, and sent again whole.
	if len(sent) != 5 || len(seen) != 4 || len(wholes) != 4 {
		t.Fatalf("%d routes sent, %d answered; %d without bases", len(sent), len(seen), len(wholes))
	}
	for i, w := range wholes {
		if !slices.Equal(seen[i], w.GetBlockHashes()) {
			t.Fatalf("turn %d: the chain the scheduler saw differs from the whole one (%d hashes, want %d)", i, len(seen[i]), len(w.GetBlockHashes()))
		}
	}
	for i, r := range sent {
		wantBase := i == 1 || i == 2 || i == 3 // turn 4's first try named the forgotten base
		if (r.GetBase() != nil) != wantBase {
			t.Fatalf("route %d: base %v", i, r.GetBase())
		}
		if whole := wholes[min(i, 3)].GetBlockHashes(); wantBase && len(r.GetBlockHashes()) >= len(whole)/2 {
			t.Fatalf("route %d sent %d of its %d hashes", i, len(r.GetBlockHashes()), len(whole))
		}
	}
	if h, n := testutil.ToFloat64(based.svc.metrics.chainBases.WithLabelValues("held")), testutil.ToFloat64(based.svc.metrics.chainBases.WithLabelValues("not_held")); h != 2 || n != 1 {
		t.Fatalf("chain_bases_total held %v, not_held %v; want 2 and 1", h, n)
	}
	if got := testutil.ToFloat64(plain.svc.metrics.chainBases.WithLabelValues("held")); got != 0 {
		t.Fatalf("a scheduler that keeps nothing was sent %v bases", got)
	}
}

// A turn that edits the session's history names only the leading blocks it
// shares with the previous chain; a turn prepared from a state whose chain
// no replica kept (its route failed) names none: whatever was sent, the
// scheduler sees the whole chain each turn would have been sent.
func TestChainBaseAfterAnEditAndAFailedRoute(t *testing.T) {
	plain := newMesh(t, nil)
	based := newMesh(t, nil)
	based.sched.chains = basecache.NewChains(1 << 20)
	system := map[string]string{"role": "system", "content": strings.Repeat("You are a careful coding agent. ", 40)}
	step := func(n int, what string) map[string]string {
		return map[string]string{"role": "user", "content": fmt.Sprintf("Step %d: %s", n, strings.Repeat(what+"; ", 20))}
	}
	answer := map[string]string{"role": "assistant", "content": "Done."}
	turns := [][]map[string]string{
		{system, step(0, "read the file")},
		{system, step(0, "read the file"), answer, step(1, "run the tests")},
		// An edit: the first step rewritten, the rest dropped.
		{system, step(0, "read the other file")},
		// Its route fails (below); the next turn extends the edit.
		{system, step(0, "read a third file")},
		{system, step(0, "read a third file"), answer, step(1, "fix the build")},
	}
	send := func(m *mesh, turn int) int {
		body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 4, "messages": turns[turn]})
		resp := post(t, m.url+"/v1/chat/completions", string(body), "x-session-id", "ses_edit")
		readAll(t, resp.Body)
		if resp.StatusCode == http.StatusOK {
			m.waitFinish(t)
		}
		return resp.StatusCode
	}
	for turn := range turns {
		if turn == 3 {
			based.sched.mu.Lock()
			based.sched.routeErrs = []error{status.Error(codes.Internal, "scheduler fault")}
			based.sched.mu.Unlock()
		}
		if code := send(based, turn); (code == http.StatusOK) != (turn != 3) {
			t.Fatalf("turn %d: status %d", turn, code)
		}
		if turn != 3 {
			send(plain, turn)
		}
	}
	wholes := plain.sched.routeCalls()
	based.sched.mu.Lock()
	seen := slices.Clone(based.sched.wholes)
	based.sched.mu.Unlock()
	if len(seen) != len(wholes) || len(seen) != 4 {
		t.Fatalf("%d routes answered, %d without bases", len(seen), len(wholes))
	}
	for i, w := range wholes {
		if !slices.Equal(seen[i], w.GetBlockHashes()) {
			t.Fatalf("route %d: the chain the scheduler saw differs from the whole one", i)
		}
	}
	sent := based.sched.routeCalls()
	if last := sent[len(sent)-1]; last.GetBase() != nil {
		t.Fatalf("the turn after a failed route named base %v", last.GetBase())
	}
	if sent[2].GetBase() == nil || int(sent[2].GetBase().GetBlocks()) >= len(wholes[1].GetBlockHashes()) {
		t.Fatalf("the edit named base %v (the previous chain has %d blocks)", sent[2].GetBase(), len(wholes[1].GetBlockHashes()))
	}
	// Held: the second turn's and the edit's; the failed route counts as
	// neither.
	if h, n := testutil.ToFloat64(based.svc.metrics.chainBases.WithLabelValues("held")), testutil.ToFloat64(based.svc.metrics.chainBases.WithLabelValues("not_held")); h != 2 || n != 0 {
		t.Fatalf("chain_bases_total held %v, not_held %v; want 2 and 0", h, n)
	}
}

// A base is named only to the replica that kept it: a turn its session's
// owner could not take goes to the next replica whole, and so does the
// turn after it to the owner, which did not keep that one's chain.
func TestChainBaseOnlyToTheReplicaThatKeptIt(t *testing.T) {
	m := newMeshReplicas(t, servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0"}, 2, nil)
	for _, f := range m.scheds {
		f.chains = basecache.NewChains(1 << 20)
	}
	var owner, next *fakeScheduler
	agentTurns(t, m, 3, func(turn int) {
		switch turn {
		case 1: // the first turn went to the session's owner
			owner, next = m.scheds[0], m.scheds[1]
			if len(next.routeCalls()) == 1 {
				owner, next = next, owner
			}
			owner.mu.Lock()
			owner.routeErrs = []error{status.Error(codes.Unavailable, "replica down")}
			owner.mu.Unlock()
		}
	})
	// The owner: the first turn, the second's attempt (on the first's chain,
	// which it kept; it answered UNAVAILABLE) and the third (whole: the
	// second's chain was kept by the next replica). The next replica: the
	// second turn, whole.
	mine, other := owner.routeCalls(), next.routeCalls()
	if len(mine) != 3 || len(other) != 1 {
		t.Fatalf("the owner was asked %d times, the next replica %d; want 3 and 1", len(mine), len(other))
	}
	if mine[0].GetBase() != nil || mine[1].GetBase() == nil || mine[2].GetBase() != nil || other[0].GetBase() != nil {
		t.Fatalf("bases named: owner %v, %v, %v; next replica %v", mine[0].GetBase(), mine[1].GetBase(), mine[2].GetBase(), other[0].GetBase())
	}
	if got := testutil.ToFloat64(m.svc.metrics.chainBases.WithLabelValues("not_held")); got != 0 {
		t.Fatalf("%v bases refused", got)
	}
}
