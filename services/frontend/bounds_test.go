package frontend

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// TestStalledWorkerMigrates: a worker silent for --stream-idle-timeout,
// before its first message or in the middle of the answer, counts as failed:
// the turn moves on and the client gets the whole answer once.
func TestStalledWorkerMigrates(t *testing.T) {
	for _, tt := range []struct {
		name  string
		stall func(*fakeShim)
	}{
		{"before the first token", func(s *fakeShim) { s.stall = true }},
		{"mid-stream", func(s *fakeShim) { s.hang = true }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMesh(t, func(c *Config, s *fakeShim) {
				// The bound covers the next attempt too, a new connection to
				// worker-8 and its first message: generous, so a loaded
				// machine does not find that one stalled as well.
				c.StreamIdleTimeout = time.Second
				tt.stall(s)
			})
			m.addShim(t, "worker-8", nil)
			resp := postOK(t, m.url+"/v1/chat/completions", streamTurn1)
			if got := chatText(t, resp, true); got != answer {
				t.Errorf("answer %q, want %q", got, answer)
			}
			servicetest.Within(t, m.shim.cancelled, "the stalled attempt was not cancelled")
			m.waitFinish(t)
			m.waitFinish(t)
			if got := testutil.ToFloat64(m.svc.metrics.migrations.WithLabelValues("stalled")); got != 1 {
				t.Errorf("migrations{stalled} = %v, want 1", got)
			}
			if fins := m.sched.finishCalls(); len(fins) != 2 || !fins[0].GetWorkerFailed() {
				t.Errorf("finishes %v, want the stalled worker reported failed", fins)
			}
		})
	}
}

// TestStalledWithoutMigrationIs504: unmigrated, a stall is a gateway timeout.
func TestStalledWithoutMigrationIs504(t *testing.T) {
	m := newMesh(t, func(c *Config, s *fakeShim) {
		c.StreamIdleTimeout = 100 * time.Millisecond
		c.MigrationLimit = -1
		s.stall = true
	})
	resp := post(t, m.url+"/v1/chat/completions", turn1)
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, "sent nothing") {
		t.Fatalf("status %d: %s, want 504 saying the worker sent nothing", resp.StatusCode, body)
	}
}

// TestInflightBound: past --max-inflight-requests a request is answered at
// once with a 503 and Retry-After in its API's shape, and counted.
func TestInflightBound(t *testing.T) {
	m := newMesh(t, func(c *Config, s *fakeShim) {
		c.MaxInflight = 1
		s.stall = true
	})
	leave := m.chatInBackground(t, "Content-Type", "application/json")

	for _, api := range []struct{ path, body, kind string }{
		{"/v1/chat/completions", turn1, `"type":"server_error"`},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, `"type":"overloaded_error"`},
	} {
		resp := post(t, m.url+api.path, api.body)
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, api.kind) {
			t.Errorf("%s: status %d, Retry-After %q: %s", api.path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if got := testutil.ToFloat64(m.svc.metrics.rejected.WithLabelValues(apiChat, "inflight")); got != 1 {
		t.Errorf("rejected{chat,inflight} = %v, want 1", got)
	}
	// /v1/models is not a generation: never bounded.
	if resp, err := http.Get(m.url + "/v1/models"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /v1/models: %v %v", resp, err)
	}
	leave()
}

// TestRouteTimeoutIs503: a turn admission held for the whole route timeout
// gets a 503 with Retry-After (the fleet is full), not a gateway timeout.
func TestRouteTimeoutIs503(t *testing.T) {
	m := newMesh(t, nil)
	m.sched.mu.Lock()
	m.sched.routeErr = status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	m.sched.mu.Unlock()
	resp := post(t, m.url+"/v1/chat/completions", turn1)
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if got := testutil.ToFloat64(m.svc.metrics.rejected.WithLabelValues(apiChat, "route_timeout")); got != 1 {
		t.Errorf("rejected{chat,route_timeout} = %v, want 1", got)
	}
}

// TestConnPoolForgetsIdleAddresses: connections to addresses unused for
// connIdleTTL are closed, so workers that came and went leave nothing; one
// an attempt still holds (a long generation) is kept however old.
func TestConnPoolForgetsIdleAddresses(t *testing.T) {
	p := newConnPool(servicekit.Dial)
	defer p.close()
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	use := func(addr string) {
		c, err := p.acquire(addr)
		if err != nil {
			t.Fatal(err)
		}
		p.release(c)
	}
	use("10.0.0.1:9500")
	use("10.0.0.2:9500")
	held, err := p.acquire("10.0.0.4:9500") // a generation longer than the TTL
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(connIdleTTL / 2)
	use("10.0.0.2:9500") // still in use
	now = now.Add(connIdleTTL/2 + time.Second)
	use("10.0.0.3:9500")
	if got := p.len(); got != 3 {
		t.Errorf("pool holds %d connections, want 3 (10.0.0.1 idle for longer than %v; 10.0.0.4 held)", got, connIdleTTL)
	}
	p.release(held)
}

// TestFrozenWorkerMigratesWithinSeconds: a worker that stops answering
// altogether (its process stopped: the stream silent, health checks
// unanswered) is left after about probeAfter + probeTimeout, long before the
// idle timeout, before its first token or mid-answer.
func TestFrozenWorkerMigratesWithinSeconds(t *testing.T) {
	for _, tt := range []struct {
		name   string
		freeze func(*fakeShim)
	}{
		{"before the first token", func(s *fakeShim) { s.stall, s.frozen = true, true }},
		{"mid-stream", func(s *fakeShim) { s.hang, s.frozen = true, true }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMesh(t, func(c *Config, s *fakeShim) { tt.freeze(s) }) // idle timeout stays 2 min
			m.addShim(t, "worker-8", nil)
			start := time.Now()
			resp := post(t, m.url+"/v1/chat/completions", streamTurn1)
			if got := chatText(t, resp, true); got != answer {
				t.Errorf("answer %q, want %q", got, answer)
			}
			if took := time.Since(start); took > probeAfter+probeTimeout+2*time.Second {
				t.Errorf("the frozen worker held the turn %v", took)
			}
			m.waitFinish(t)
			m.waitFinish(t)
			if got := testutil.ToFloat64(m.svc.metrics.migrations.WithLabelValues("unresponsive")); got != 1 {
				t.Errorf("migrations{unresponsive} = %v, want 1", got)
			}
		})
	}
}

// TestSlowButAliveWorkerIsNotLeft: a worker silent for longer than the probe
// interval (a long prefill) whose shim answers its health checks keeps the
// turn.
func TestSlowButAliveWorkerIsNotLeft(t *testing.T) {
	m := newMesh(t, func(c *Config, s *fakeShim) { s.delay = 3 * probeAfter })
	m.addShim(t, "worker-8", nil)
	resp := post(t, m.url+"/v1/chat/completions", streamTurn1)
	if got := chatText(t, resp, true); got != answer || resp.Header.Get(workerHeader) != "worker-7" {
		t.Errorf("answer %q from %s, want %q from worker-7", got, resp.Header.Get(workerHeader), answer)
	}
	m.waitFinish(t)
	for _, reason := range []string{"unresponsive", "stalled"} {
		if got := testutil.ToFloat64(m.svc.metrics.migrations.WithLabelValues(reason)); got != 0 {
			t.Errorf("migrations{%s} = %v, want 0", reason, got)
		}
	}
}
