package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/frontend/console"
)

// TestConsoleState: one JSON document of the fleet, its workers and the
// sessions with their turns, then the same streamed as Server-Sent Events.
func TestConsoleState(t *testing.T) {
	m := newMesh(t, nil)
	// Before any turn: the lists are empty, not null.
	if code, body := getAdmin(t, m, "/console/state"); code != 200 || !strings.Contains(body, `"sessions":[]`) {
		t.Fatalf("state before any turn: %d %s", code, body)
	}
	// The state just gathered serves viewers for a second: wait it out.
	time.Sleep(consoleEvery)
	postOK(t, m.url+"/v1/chat/completions", turn1, "X-Claude-Code-Session-Id", "root-1")
	m.waitFinish(t)
	code, body := getAdmin(t, m, "/console/state")
	if code != 200 {
		t.Fatalf("state: %d %s", code, body)
	}
	var st console.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.LeaseTTLS != 10 {
		t.Fatalf("lease %v s, want the scheduler's 10", st.LeaseTTLS)
	}
	if len(st.Workers) != 1 || st.Workers[0].ID != "worker-7" || st.Workers[0].KV[0].Tier != "device" || *st.Workers[0].KV[0].UsedBlocks != 10 {
		t.Fatalf("workers %+v", st.Workers)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].SessionID != "root-1" || st.Sessions[0].Turns != 1 || len(st.Sessions[0].RecentTurns) != 1 {
		t.Fatalf("sessions %+v", st.Sessions)
	}
	if turn := st.Sessions[0].RecentTurns[0]; turn.WorkerID != "worker-7" || turn.TTFTMs <= 0 || turn.TotalMs < turn.TTFTMs || turn.PromptTokens == 0 {
		t.Fatalf("turn %+v", turn)
	}
	if st.Cache.PromptTokens != st.Sessions[0].PromptTokens {
		t.Fatalf("cache %+v", st.Cache)
	}
	// Evictions are summed over the workers that report them; re-prefills
	// no worker reports stay unknown.
	if e := st.Cache.EvictedBlocks; e == nil || *e != 3 || st.Cache.RePrefilledTokens != nil || *st.Workers[0].EvictedBlocks != 3 {
		t.Fatalf("evictions %v, re-prefills %v", e, st.Cache.RePrefilledTokens)
	}
	// The session's turns as a Perfetto trace, to download.
	code, body = getAdmin(t, m, "/console/sessions/anonymous/root-1/perfetto")
	if code != 200 || !strings.Contains(body, `"traceEvents"`) || !strings.Contains(body, st.Sessions[0].RecentTurns[0].RequestID) {
		t.Fatalf("perfetto: %d %.300s", code, body)
	}
	if code, body := getAdmin(t, m, "/console/sessions/anonymous/nobody/perfetto"); code != 404 {
		t.Fatalf("perfetto of an unknown session: %d %s", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.url+"/console/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	for frames := 0; frames < 2; {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d frames: %v", frames, err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var st console.State
			if err := json.Unmarshal([]byte(data), &st); err != nil || len(st.Sessions) != 1 {
				t.Fatalf("frame %d: %v %s", frames, err, data)
			}
			frames++
		} else if line != "event: state\n" && line != "\n" {
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// TestConsoleTenancy: with keys, the console needs one, and a tenant's
// key shows only that tenant's sessions.
func TestConsoleTenancy(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.APIKeys = map[string]string{"k-a": "acme", "k-b": "bravo"} })
	for _, k := range []string{"k-a", "k-b"} {
		postOK(t, m.url+"/v1/chat/completions", turn1, "Authorization", "Bearer "+k, "x-session-id", "s-"+k)
		m.waitFinish(t)
	}
	for _, path := range []string{"/console/state", "/console/events"} {
		if code, b := getAdmin(t, m, path); code != 401 || !strings.Contains(b, "invalid_api_key") {
			t.Fatalf("%s without a key: %d %s", path, code, b)
		}
	}
	code, body := getAdmin(t, m, "/console/state", "Authorization", "Bearer k-a")
	var st console.State
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("acme: %d %v %s", code, err, body)
	}
	if st.Tenant != "acme" || len(st.Sessions) != 1 || st.Sessions[0].Tenant != "acme" || st.Sessions[0].SessionID != "s-k-a" {
		t.Fatalf("acme sees %+v", st)
	}
	if code, b := getAdmin(t, m, "/console/state?tenant=bravo", "x-api-key", "k-a"); code != 403 {
		t.Fatalf("acme asking for bravo: %d %s", code, b)
	}
	if code, b := getAdmin(t, m, "/console/sessions/bravo/s-k-b/perfetto", "x-api-key", "k-a"); code != 403 {
		t.Fatalf("acme downloading bravo's trace: %d %s", code, b)
	}
	if code, b := getAdmin(t, m, "/console/sessions/bravo/s-k-b/perfetto", "x-api-key", "k-b"); code != 200 {
		t.Fatalf("bravo downloading its trace: %d %s", code, b)
	}
}

// TestTenantMismatchSaysWhatIsWrong: a tenant's key asking for another
// tenant is told which tenant it is scoped to and which it asked for (403,
// in the admin API's and the console's shapes); an operator's ?tenant= that
// contradicts the tenant a trace's path names is told that (400), not that
// its key is not that tenant's.
func TestTenantMismatchSaysWhatIsWrong(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) {
		c.APIKeys = map[string]string{"k-a": "acme", "k-b": "bravo", "k-op": OperatorTenant}
	})
	for _, c := range []struct {
		path, key string
		status    int
		param     string
		names     []string // what the message must name
	}{
		{"/v1/admin/sessions?tenant=bravo", "k-a", 403, "", []string{`"acme"`, `"bravo"`}},
		{"/v1/admin/sessions/s-1?tenant=bravo", "k-a", 403, "", []string{`"acme"`, `"bravo"`}},
		{"/v1/admin/sessions/acme%2Fs-1?tenant=bravo", "k-a", 403, "", []string{`"acme"`, `"bravo"`}},
		{"/console/state?tenant=bravo", "k-a", 403, "", []string{`"acme"`, `"bravo"`}},
		{"/console/sessions/bravo/s-1/perfetto", "k-a", 403, "", []string{`"acme"`, `"bravo"`}},
		{"/console/sessions/bravo/s-1/perfetto?tenant=acme", "k-op", 400, "tenant", []string{`?tenant="acme"`, `"bravo"`}},
		{"/console/sessions/acme/s-1/perfetto?tenant=bravo", "k-a", 400, "tenant", []string{`?tenant="bravo"`, `"acme"`}},
	} {
		code, body := getAdmin(t, m, c.path, "Authorization", "Bearer "+c.key)
		// The gateway's shape ({"code","message"}) or the console's
		// (OpenAI's {"error":{"message","param"}}).
		var e struct {
			Message string `json:"message"`
			Error   struct {
				Message string  `json:"message"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != c.status {
			t.Errorf("%s with %s: %d %s, want %d", c.path, c.key, code, body, c.status)
			continue
		}
		msg := e.Message + e.Error.Message
		for _, name := range c.names {
			if !strings.Contains(msg, name) {
				t.Errorf("%s with %s: %q does not name %s", c.path, c.key, msg, name)
			}
		}
		if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
			t.Errorf("%s with %s: param %v, want %q", c.path, c.key, e.Error.Param, c.param)
		}
	}
}

// TestProgramLog: the console keeps each program's latest admission
// decisions, not the turns' own steps nor the snapshot, at most eight.
func TestProgramLog(t *testing.T) {
	l := newProgramLog(16)
	ev := func(typ schedulerv1.ProgramEventType, reason string, life schedulerv1.ProgramLifecycle) *schedulerv1.WatchProgramsResponse {
		return &schedulerv1.WatchProgramsResponse{Type: typ, Reason: reason,
			Program: &schedulerv1.Program{SessionId: "s", Tenant: "t", Lifecycle: life, WorkerId: "w1"}}
	}
	changed, paused, active := schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_CHANGED,
		schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED, schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_ACTIVE
	l.add(ev(schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING, "snapshot", paused))
	l.add(ev(changed, "reasoning", active))
	l.add(ev(changed, "paused", paused))
	l.add(ev(changed, "resumed", active))
	got := l.of(sessionKey("t", "s"))
	if len(got) != 2 || got[0].Reason != "paused" || got[0].Lifecycle != "PAUSED" || got[1].Reason != "resumed" || got[1].WorkerID != "w1" {
		t.Fatalf("log %+v", got)
	}
	for range 10 {
		l.add(ev(changed, "rotated", paused))
	}
	if got := l.of(sessionKey("t", "s")); len(got) != admissionsKept || got[0].Reason != "rotated" {
		t.Fatalf("bounded log %+v", got)
	}
	if got := l.of(sessionKey("t", "other")); got == nil || len(got) != 0 {
		t.Fatalf("unknown program: %v", got)
	}
}

// TestConsoleCountsProgramsByWorker: each worker's programs by state, a
// paused one on the worker it queues on, and only the key's tenant's.
func TestConsoleCountsProgramsByWorker(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.APIKeys = map[string]string{"k-a": "acme"} })
	m.addWorker("w-b", "127.0.0.1:1")
	m.addWorker("w-c", "127.0.0.1:2")
	prog := func(tenant, worker, last string, ph schedulerv1.ProgramPhase, lc schedulerv1.ProgramLifecycle, tokens uint64) *schedulerv1.Program {
		return &schedulerv1.Program{SessionId: tenant + worker + last, Tenant: tenant, WorkerId: worker, LastWorkerId: last,
			Phase: ph, Lifecycle: lc, TokenTotal: tokens}
	}
	reasoning, acting := schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING, schedulerv1.ProgramPhase_PROGRAM_PHASE_ACTING
	active, paused := schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_ACTIVE, schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED
	m.sched.mu.Lock()
	m.sched.programs = []*schedulerv1.Program{
		prog("acme", "worker-7", "worker-7", reasoning, active, 100),
		prog("acme", "", "w-b", acting, paused, 200),
		prog("acme", "w-c", "w-c", acting, active, 300),
		prog("other", "w-c", "w-c", acting, active, 400),
		// Released, kept a while for the views: on no worker's card.
		{SessionId: "done", Tenant: "acme", LastWorkerId: "w-c", Phase: acting,
			Lifecycle: schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_TERMINATED, TokenTotal: 500},
	}
	m.sched.mu.Unlock()
	code, body := getAdmin(t, m, "/console/state", "x-api-key", "k-a")
	var st console.State
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || len(st.Workers) != 3 {
		t.Fatalf("state: %d %v %s", code, err, body)
	}
	want := map[string]console.Programs{
		"worker-7": {ReasoningActive: 1, Tokens: 100},
		"w-b":      {ActingPaused: 1, Tokens: 200},
		"w-c":      {ActingActive: 1, Tokens: 300},
	}
	for _, w := range st.Workers {
		if w.Programs != want[w.ID] || w.Address != "" {
			t.Errorf("%s: programs %+v, address %q; want %+v and no address in a tenant's view", w.ID, w.Programs, w.Address, want[w.ID])
		}
	}
}

// TestOutageLoggedOnce: a peer that stops answering is logged once, and
// once again when it answers, however many calls fail in between.
func TestOutageLoggedOnce(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var o outage
	ctx := context.Background()
	for range 3 {
		o.failed(ctx, log, "the peer", errors.New("refused"))
	}
	o.answered(ctx, log, "the peer")
	o.answered(ctx, log, "the peer")
	if n := strings.Count(buf.String(), "\n"); n != 2 || !strings.Contains(buf.String(), "does not answer") || !strings.Contains(buf.String(), "answers again") {
		t.Fatalf("logged %d lines:\n%s", n, buf.String())
	}
}
