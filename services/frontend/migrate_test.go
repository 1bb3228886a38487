package frontend

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/trace"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

const answer = " Hello there, agent. All good."

var streamTurn1 = strings.Replace(turn1, `"messages"`, `"stream":true,"messages"`, 1)

// bothWays runs f as the subtest name, once for a complete answer and once
// for a streamed one (name/stream).
func bothWays(t *testing.T, name string, f func(t *testing.T, stream bool)) {
	for _, stream := range []bool{false, true} {
		n := name
		if stream {
			n += "/stream"
		}
		t.Run(n, func(t *testing.T) { f(t, stream) })
	}
}

// chatTurn1 is turn1, streamed or not.
func chatTurn1(stream bool) string {
	if stream {
		return streamTurn1
	}
	return turn1
}

// chatText is the answer of a Chat Completions response, streamed or not;
// it fails the test on an in-band error or a stream without [DONE].
func chatText(t *testing.T, resp *http.Response, stream bool) string {
	t.Helper()
	if !stream {
		var cc chat.ChatCompletion
		body := readAll(t, resp.Body)
		if err := json.Unmarshal([]byte(body), &cc); err != nil || len(cc.Choices) != 1 || cc.Choices[0].Message.Content == nil {
			t.Fatalf("not a completion: %s (%v)", body, err)
		}
		return *cc.Choices[0].Message.Content
	}
	_, datas := sseEvents(t, resp.Body)
	if len(datas) == 0 || datas[len(datas)-1] != "[DONE]" {
		t.Fatalf("stream = %q", datas)
	}
	var b strings.Builder
	for _, d := range datas[:len(datas)-1] {
		if strings.Contains(d, `"error"`) {
			t.Fatalf("in-band error: %s", d)
		}
		var ch chat.ChatCompletionChunk
		if err := json.Unmarshal([]byte(d), &ch); err != nil {
			t.Fatalf("chunk %q: %v", d, err)
		}
		if len(ch.Choices) == 1 && ch.Choices[0].Delta.Content != nil {
			b.WriteString(*ch.Choices[0].Delta.Content)
		}
	}
	return b.String()
}

// TestMigrationBeforeFirstToken: a worker that fails before its first
// token, however it fails, costs the client nothing: the turn routes again
// excluding it and the client gets one normal, complete answer from the
// next worker. The failed attempt is finished (its load freed), counted
// and traced.
func TestMigrationBeforeFirstToken(t *testing.T) {
	tests := []struct {
		name   string
		fail   func(t *testing.T, m *mesh) // makes worker-7 fail before its first token
		reason string
		traced bool // check the request-trace record too
	}{
		{"unavailable", failBefore(status.Error(codes.Unavailable, "engine restarting")), "unavailable", true},
		{"internal", failBefore(status.Error(codes.Internal, "engine crashed")), "internal", false},
		{"aborted", failBefore(status.Error(codes.Aborted, "preempted")), "aborted", false},
		{"deadline exceeded", failBefore(status.Error(codes.DeadlineExceeded, "engine timed out")), "deadline_exceeded", false},
		{"stream closed without a message", failBefore(io.EOF), "unavailable", false},
		{"connection refused", func(t *testing.T, m *mesh) {
			m.sched.mu.Lock()
			m.sched.addr = servicetest.FreeAddr(t)
			m.sched.mu.Unlock()
		}, "unavailable", true},
		{"address that does not parse", func(t *testing.T, m *mesh) {
			m.sched.mu.Lock()
			m.sched.addr = "bad\x00address"
			m.sched.mu.Unlock()
		}, "dial", false},
	}
	for _, tt := range tests {
		bothWays(t, tt.name, func(t *testing.T, stream bool) {
			tracePath := filepath.Join(t.TempDir(), "trace.jsonl")
			m := newMesh(t, func(c *Config, _ *fakeShim) { c.TraceFile = tracePath })
			tt.fail(t, m)
			next := m.addShim(t, "worker-8", nil)

			resp := postOK(t, m.url+"/v1/chat/completions", chatTurn1(stream), "x-session-id", "ses_m")
			if got := resp.Header.Get(workerHeader); got != "worker-8" {
				t.Errorf("%s = %q, want worker-8", workerHeader, got)
			}
			if got := chatText(t, resp, stream); got != answer {
				t.Errorf("answer %q, want %q", got, answer)
			}
			m.waitFinish(t)
			m.waitFinish(t)

			routes := m.sched.routeCalls()
			if len(routes) != 2 {
				t.Fatalf("%d routes, want 2", len(routes))
			}
			if len(routes[0].GetExcludeWorkers()) != 0 || !slices.Equal(routes[1].GetExcludeWorkers(), []string{"worker-7"}) ||
				routes[1].GetRequestId() != routes[0].GetRequestId() {
				t.Errorf("routes exclude %v then %v (ids %s, %s), want none then [worker-7] for one request",
					routes[0].GetExcludeWorkers(), routes[1].GetExcludeWorkers(), routes[0].GetRequestId(), routes[1].GetRequestId())
			}
			fins := m.sched.finishCalls()
			if len(fins) != 2 ||
				fins[0].GetWorkerId() != "worker-7" || fins[0].GetFinishReason() != enginev1.FinishReason_FINISH_REASON_ABORT || fins[0].GetUsage().GetCompletionTokens() != 0 ||
				fins[1].GetWorkerId() != "worker-8" || fins[1].GetFinishReason() != enginev1.FinishReason_FINISH_REASON_STOP {
				t.Errorf("finishes %v, want worker-7 aborted, then worker-8 stopped", fins)
			}
			next.mu.Lock()
			n := len(next.reqs)
			next.mu.Unlock()
			if n != 1 {
				t.Errorf("worker-8 saw %d generations, want 1", n)
			}
			if got := testutil.ToFloat64(m.svc.metrics.migrations.WithLabelValues(tt.reason)); got != 1 {
				t.Errorf("migrations{reason=%q} = %v, want 1", tt.reason, got)
			}

			if stream || !tt.traced {
				return // a record takes a trace flush (1 s) to appear
			}
			rec, _ := readTrace(t, tracePath)
			r := rec.Request
			if r.Worker.WorkerName != "worker-8" || len(r.Migrations) != 1 ||
				r.Migrations[0] != (trace.Migration{FromWorker: "worker-7", Reason: tt.reason}) {
				t.Errorf("trace worker %+v, migrations %+v", r.Worker, r.Migrations)
			}
		})
	}
}

func failBefore(err error) func(*testing.T, *mesh) {
	return func(_ *testing.T, m *mesh) {
		m.shim.mu.Lock()
		m.shim.failBefore = err
		m.shim.mu.Unlock()
	}
}

// readTrace waits (within a deadline) for the first request-trace record
// of path, and returns it and its line; records are written off the
// request path.
func readTrace(t *testing.T, path string) (*trace.Record, string) {
	t.Helper()
	var line string
	servicetest.Poll(servicetest.Patience, func() bool {
		if data, err := os.ReadFile(path); err == nil {
			line, _, _ = strings.Cut(string(data), "\n")
		}
		return line != ""
	})
	var env trace.Envelope
	if err := json.Unmarshal([]byte(line), &env); err != nil || env.Event == nil || env.Event.Request == nil {
		t.Fatalf("no trace record: %q (%v)", line, err)
	}
	return env.Event, line
}

// TestMigrationLimit: past --migration-limit the client is answered as
// before migration existed, a 503 in the API's own shape; the exclusions
// grow with each failed worker.
func TestMigrationLimit(t *testing.T) {
	for _, api := range []struct {
		path, body string
		anthropic  bool
	}{
		{path: "/v1/chat/completions", body: turn1},
		{path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, anthropic: true},
	} {
		t.Run(api.path, func(t *testing.T) {
			unavailable := status.Error(codes.Unavailable, "engine down")
			m := newMesh(t, func(c *Config, s *fakeShim) { c.MigrationLimit = 2; s.failBefore = unavailable })
			m.addShim(t, "worker-8", func(s *fakeShim) { s.failBefore = unavailable })
			m.addShim(t, "worker-9", func(s *fakeShim) { s.failBefore = unavailable })
			spare := m.addShim(t, "worker-10", nil)

			resp := post(t, m.url+api.path, api.body)
			body := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503: %s", resp.StatusCode, body)
			}
			var e struct {
				Type  string                `json:"type"`
				Error struct{ Type string } `json:"error"`
			}
			json.Unmarshal([]byte(body), &e)
			if want := map[bool]string{false: "server_error", true: "overloaded_error"}[api.anthropic]; e.Error.Type != want || (e.Type == "error") != api.anthropic {
				t.Errorf("error body %s, want the API's shape with %s", body, want)
			}
			for range 3 {
				m.waitFinish(t)
			}
			var excludes [][]string
			for _, r := range m.sched.routeCalls() {
				excludes = append(excludes, r.GetExcludeWorkers())
			}
			want := [][]string{nil, {"worker-7"}, {"worker-7", "worker-8"}}
			if len(excludes) != len(want) || !slices.EqualFunc(excludes, want, slices.Equal) {
				t.Errorf("route exclusions %q, want %q", excludes, want)
			}
			if fins := m.sched.finishCalls(); len(fins) != 3 {
				t.Errorf("%d finishes, want one per attempt (3)", len(fins))
			}
			spare.mu.Lock()
			tried := len(spare.reqs)
			spare.mu.Unlock()
			if tried != 0 {
				t.Error("a fourth worker was tried past the limit")
			}
			if got := testutil.ToFloat64(m.svc.metrics.migrations.WithLabelValues("unavailable")); got != 2 {
				t.Errorf("migrations = %v, want 2", got)
			}
		})
	}
}

// TestNoMigration: what a migration would not fix is answered as before:
// the request's own faults, the client going away, and any worker failure
// when migration is off.
func TestNoMigration(t *testing.T) {
	t.Run("invalid argument", func(t *testing.T) {
		m := newMesh(t, func(_ *Config, s *fakeShim) { s.failBefore = status.Error(codes.InvalidArgument, "prompt too long") })
		m.addShim(t, "worker-8", nil)
		resp := post(t, m.url+"/v1/chat/completions", turn1)
		if body := readAll(t, resp.Body); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400: %s", resp.StatusCode, body)
		}
		m.waitFinish(t)
		checkNoMigration(t, m)
	})

	t.Run("client gone", func(t *testing.T) {
		m := newMesh(t, func(_ *Config, s *fakeShim) { s.stall = true })
		m.addShim(t, "worker-8", nil)
		leave := m.chatInBackground(t)
		leave()
		servicetest.Within(t, m.shim.cancelled, "the generation was not cancelled")
		m.waitFinish(t)
		checkNoMigration(t, m)
	})

	bothWays(t, "after the first token, migration off", func(t *testing.T, stream bool) {
		m := newMesh(t, func(c *Config, s *fakeShim) {
			c.MigrationLimit = -1
			s.failAfter = status.Error(codes.Unavailable, "engine died")
		})
		m.addShim(t, "worker-8", nil)
		resp := post(t, m.url+"/v1/chat/completions", chatTurn1(stream))
		if !stream {
			// Nothing was written yet: the error is the response.
			if body := readAll(t, resp.Body); resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503: %s", resp.StatusCode, body)
			}
		} else {
			// Streaming began: the error comes in-band, after what was
			// streamed, and no [DONE].
			if resp.StatusCode != 200 || resp.Header.Get(workerHeader) != "worker-7" {
				t.Fatalf("status %d from %q", resp.StatusCode, resp.Header.Get(workerHeader))
			}
			_, datas := sseEvents(t, bufio.NewReader(resp.Body))
			if len(datas) < 2 || !strings.Contains(datas[len(datas)-1], `"error"`) || slices.Contains(datas, "[DONE]") {
				t.Fatalf("stream %q, want chunks then an in-band error", datas)
			}
		}
		m.waitFinish(t)
		checkNoMigration(t, m)
		if fins := m.sched.finishCalls(); len(fins) != 1 || !fins[0].GetWorkerFailed() {
			t.Errorf("finishes %v, want one that reports the worker failed", fins)
		}
	})
}

// TestMigrationWithNoWorkerLeft: a turn whose only worker fails is
// answered with that failure at once, not held for the route retry budget
// and answered "the scheduler is unavailable": the scheduler's refusal of a
// route that excludes every live worker is not an outage.
func TestMigrationWithNoWorkerLeft(t *testing.T) {
	m := newMesh(t, func(c *Config, s *fakeShim) {
		c.RouteRetryBudget = time.Minute
		s.failBefore = status.Error(codes.Internal, "engine HTTP 500: EngineCore encountered an issue")
	})
	start := time.Now()
	resp := post(t, m.url+"/v1/chat/completions", turn1)
	body := readAll(t, resp.Body)
	if resp.StatusCode < 500 || !strings.Contains(body, "EngineCore") || strings.Contains(body, "scheduler") {
		t.Fatalf("status %d: %s; want the engine's failure", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("answered after %v: the refused route was retried as an outage", d)
	}
	if n := len(m.sched.routeCalls()); n != 2 {
		t.Errorf("%d routes, want the first and the one that excluded the failed worker", n)
	}
}

// TestMigrationAsksTheNextReplica: a replica that knows no worker but the
// one a turn failed on (FAILED_PRECONDITION: it restarted and has not heard
// every shim yet, or a shim cannot reach it) is not the last word: the next
// replica, which knows another worker, takes the turn over.
func TestMigrationAsksTheNextReplica(t *testing.T) {
	m := newMeshReplicas(t, servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0"}, 2, func(c *Config, s *fakeShim) {
		s.failBefore = status.Error(codes.Unavailable, "engine restarting")
	})
	m.addShim(t, "worker-8", nil)
	// worker-8 is live, but only the second replica has heard of it.
	m.sched.mu.Lock()
	others := m.sched.others
	m.sched.others = nil
	m.sched.mu.Unlock()
	m.scheds[1].mu.Lock()
	m.scheds[1].others = others
	m.scheds[1].mu.Unlock()
	for i := range 8 { // sessions owned by either replica
		resp := post(t, m.url+"/v1/chat/completions", turn1, "x-session-id", fmt.Sprint("ses-", i))
		if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK {
			t.Errorf("session ses-%d: %d %s; want it moved to worker-8 by the replica that knows it", i, resp.StatusCode, body)
		}
	}
}

// TestMigrationMidStream: a worker that fails after streaming began hands
// the turn to another worker whose prompt carries the tokens already sent;
// the client sees one uninterrupted answer, each token once, with the usage
// of its own prompt and of every token it got.
func TestMigrationMidStream(t *testing.T) {
	bothWays(t, "answer", func(t *testing.T, stream bool) {
		tracePath := filepath.Join(t.TempDir(), "trace.jsonl")
		m := newMesh(t, func(c *Config, s *fakeShim) {
			c.TraceFile = tracePath
			s.failAfter = status.Error(codes.Unavailable, "engine died")
		})
		next := m.addShim(t, "worker-8", nil)
		// A cap the client set: the continuation's is what is left of it.
		body := strings.Replace(chatTurn1(stream), `{"model":"m",`, `{"model":"m","max_tokens":64,`, 1)
		resp := postOK(t, m.url+"/v1/chat/completions", body, "x-session-id", "ses_mid")
		// Headers went out with the first worker's first token.
		if got := resp.Header.Get(workerHeader); got != "worker-7" {
			t.Errorf("%s = %q, want worker-7", workerHeader, got)
		}
		var usage chat.ChatUsage
		if stream {
			if got := chatText(t, resp, true); got != answer {
				t.Errorf("answer %q, want %q", got, answer)
			}
		} else {
			var cc chat.ChatCompletion
			if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &cc); err != nil || len(cc.Choices) != 1 || cc.Choices[0].Message.Content == nil {
				t.Fatalf("not a completion (%v)", err)
			}
			if got := *cc.Choices[0].Message.Content; got != answer {
				t.Errorf("answer %q, want %q", got, answer)
			}
			usage = *cc.Usage
		}
		m.waitFinish(t)
		m.waitFinish(t)

		first := m.shim.requests()[0]
		next.mu.Lock()
		cont := next.reqs
		next.mu.Unlock()
		if len(cont) != 1 {
			t.Fatalf("worker-8 saw %d generations, want 1", len(cont))
		}
		sent := m.shim.answer[:2] // the fake fails after its first two-token delta
		wantPrompt := append(slices.Clone(first.GetTokenIds()), sent...)
		if !slices.Equal(cont[0].GetTokenIds(), wantPrompt) {
			t.Errorf("continued prompt has %d tokens, want the %d of the prompt plus the 2 sent", len(cont[0].GetTokenIds()), len(first.GetTokenIds()))
		}
		if got, want := cont[0].GetSampling().GetMaxTokens(), uint32(64-2); got != want {
			t.Errorf("continued max_tokens %d, want %d", got, want)
		}
		if n := len(wantPrompt) / 16; len(cont[0].GetBlockHashes()) != n ||
			!slices.Equal(cont[0].GetBlockHashes()[:len(first.GetBlockHashes())], first.GetBlockHashes()) {
			t.Errorf("continued block hashes %d, want %d extending the prompt's", len(cont[0].GetBlockHashes()), n)
		}
		routes := m.sched.routeCalls()
		if len(routes) != 2 || !slices.Equal(routes[1].GetExcludeWorkers(), []string{"worker-7"}) ||
			int(routes[1].GetPromptTokens()) != len(wantPrompt) {
			t.Errorf("routes %v, want a second one without worker-7 for the carried prompt", routes)
		}
		fins := m.sched.finishCalls()
		if len(fins) != 2 || !fins[0].GetWorkerFailed() || fins[0].GetUsage().GetCompletionTokens() != 0 ||
			fins[1].GetWorkerId() != "worker-8" || fins[1].GetWorkerFailed() ||
			int(fins[1].GetUsage().GetCompletionTokens()) != len(m.shim.answer) ||
			int(fins[1].GetUsage().GetPromptTokens()) != len(first.GetTokenIds()) {
			t.Errorf("finishes %v, want worker-7 cancelled as failed, then worker-8 with the turn's own usage", fins)
		}
		if !stream {
			if int(usage.PromptTokens) != len(first.GetTokenIds()) || int(usage.CompletionTokens) != len(m.shim.answer) {
				t.Errorf("usage %+v, want prompt %d, completion %d", usage, len(first.GetTokenIds()), len(m.shim.answer))
			}
			rec, _ := readTrace(t, tracePath)
			r := rec.Request
			if r.Worker.WorkerName != "worker-8" || len(r.Migrations) != 1 ||
				r.Migrations[0] != (trace.Migration{FromWorker: "worker-7", Reason: "unavailable", AfterTokens: 2}) {
				t.Errorf("trace worker %+v, migrations %+v", r.Worker, r.Migrations)
			}
		}
		if got := testutil.ToFloat64(m.svc.metrics.migrations.WithLabelValues("unavailable")); got != 1 {
			t.Errorf("migrations = %v, want 1", got)
		}
	})
}

// checkNoMigration: one route, one finish (worker-7's), nothing counted.
func checkNoMigration(t *testing.T, m *mesh) {
	t.Helper()
	if n := len(m.sched.routeCalls()); n != 1 {
		t.Errorf("%d routes, want 1", n)
	}
	if fins := m.sched.finishCalls(); len(fins) != 1 || fins[0].GetWorkerId() != "worker-7" {
		t.Errorf("finishes %v, want worker-7's alone", fins)
	}
	for _, reason := range []string{"dial", "unavailable", "internal", "aborted", "deadline_exceeded"} {
		if got := testutil.ToFloat64(m.svc.metrics.migrations.WithLabelValues(reason)); got != 0 {
			t.Errorf("migrations{reason=%q} = %v, want 0", reason, got)
		}
	}
}

// TestRouteRetryWhileSchedulerUnavailable: a scheduler that answers
// UNAVAILABLE a few times (restarting) costs the client only the wait.
func TestRouteRetryWhileSchedulerUnavailable(t *testing.T) {
	m := newMesh(t, nil)
	m.sched.mu.Lock()
	m.sched.routeErrs = []error{status.Error(codes.Unavailable, "restarting"), status.Error(codes.Unavailable, "restarting")}
	m.sched.mu.Unlock()
	resp := postOK(t, m.url+"/v1/chat/completions", turn1)
	if got := chatText(t, resp, false); got != answer {
		t.Errorf("answer %q", got)
	}
	m.waitFinish(t)
	if n := len(m.sched.routeCalls()); n != 3 {
		t.Errorf("%d routes, want 3", n)
	}
}

// TestRouteRetryBudget: a scheduler unavailable past --route-retry-budget
// is a 503 with Retry-After: 1 in the API's shape; a shed
// (ResourceExhausted) and a negative budget are never retried.
func TestRouteRetryBudget(t *testing.T) {
	t.Run("budget spent", func(t *testing.T) {
		m := newMesh(t, func(c *Config, _ *fakeShim) { c.RouteRetryBudget = 300 * time.Millisecond })
		m.sched.mu.Lock()
		m.sched.routeErr = status.Error(codes.Unavailable, "connection refused")
		m.sched.mu.Unlock()
		for _, api := range []struct{ path, body, shape string }{
			{"/v1/chat/completions", turn1, `"type":"server_error"`},
			{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, `"type":"overloaded_error"`},
		} {
			before := len(m.sched.routeCalls())
			resp := post(t, m.url+api.path, api.body)
			body := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, api.shape) {
				t.Errorf("%s: status %d, Retry-After %q, body %s; want 503, 1, %s", api.path, resp.StatusCode, resp.Header.Get("Retry-After"), body, api.shape)
			}
			if n := len(m.sched.routeCalls()) - before; n < 2 {
				t.Errorf("%s: %d routes, want retries", api.path, n)
			}
		}
	})
	t.Run("shed", func(t *testing.T) {
		m := newMesh(t, nil)
		m.sched.mu.Lock()
		m.sched.routeErr = shedStatus(t, codes.ResourceExhausted, time.Second)
		m.sched.mu.Unlock()
		resp := post(t, m.url+"/v1/chat/completions", turn1)
		readAll(t, resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests || len(m.sched.routeCalls()) != 1 {
			t.Errorf("status %d after %d routes, want 429 after 1", resp.StatusCode, len(m.sched.routeCalls()))
		}
	})
	t.Run("no retry", func(t *testing.T) {
		m := newMesh(t, func(c *Config, _ *fakeShim) { c.RouteRetryBudget = -1 })
		m.sched.mu.Lock()
		m.sched.routeErr = status.Error(codes.Unavailable, "down")
		m.sched.mu.Unlock()
		resp := post(t, m.url+"/v1/chat/completions", turn1)
		readAll(t, resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || len(m.sched.routeCalls()) != 1 {
			t.Errorf("status %d after %d routes, want 503 after 1", resp.StatusCode, len(m.sched.routeCalls()))
		}
	})
}

func TestRouteBackoff(t *testing.T) {
	tests := []struct {
		attempt  int
		r        float64
		min, max time.Duration
	}{
		{0, 0, 25 * time.Millisecond, 25 * time.Millisecond},
		{0, 0.999, 49 * time.Millisecond, 50 * time.Millisecond},
		{1, 0, 50 * time.Millisecond, 50 * time.Millisecond},
		{4, 0.5, 600 * time.Millisecond, 600 * time.Millisecond}, // 800 ms: 400 + 200
		{5, 0.999, 999 * time.Millisecond, time.Second},          // capped at 1 s
		{62, 0, 500 * time.Millisecond, 500 * time.Millisecond},  // no overflow
	}
	for _, tt := range tests {
		if got := routeBackoff(tt.attempt, tt.r); got < tt.min || got > tt.max {
			t.Errorf("routeBackoff(%d, %v) = %v, want in [%v, %v]", tt.attempt, tt.r, got, tt.min, tt.max)
		}
	}
}

func TestMigrationFlags(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.MigrationLimit != 3 || cfg.RouteRetryBudget != 5*time.Second {
		t.Fatalf("defaults %d, %v", cfg.MigrationLimit, cfg.RouteRetryBudget)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	t.Setenv("SWITCHYARD_MIGRATION_LIMIT", "5")
	t.Setenv("SWITCHYARD_ROUTE_RETRY_BUDGET", "2s")
	if err := servicekit.ParseFlags(fs, []string{"--route-retry-budget", "750ms"}); err != nil {
		t.Fatal(err)
	}
	if cfg.MigrationLimit != 5 || cfg.RouteRetryBudget != 750*time.Millisecond {
		t.Fatalf("limit %d, budget %v; want 5 from the environment, 750ms from the flag", cfg.MigrationLimit, cfg.RouteRetryBudget)
	}
	if c := (Config{MigrationLimit: -1, RouteRetryBudget: -1}).withDefaults(); c.MigrationLimit != -1 || c.RouteRetryBudget != -1 {
		t.Fatalf("negative (off) turned into %d, %v", c.MigrationLimit, c.RouteRetryBudget)
	}
}
