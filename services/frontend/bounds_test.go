package frontend

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// A badly framed body is the client's fault: a 400 in the API's shape, not
// a 500.
func TestBadlyFramedBodyIs400(t *testing.T) {
	m := newMesh(t, nil)
	status, body := rawPost(t, m.url, "/v1/messages", "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", true)
	if status != http.StatusBadRequest || !strings.Contains(body, `"type":"invalid_request_error"`) || !strings.Contains(body, "could not be read") {
		t.Errorf("bad chunking: %d %s, want a 400 saying the body could not be read", status, body)
	}
	if got := testutil.ToFloat64(m.svc.metrics.requests.WithLabelValues(apiMessages, "500")); got != 0 {
		t.Errorf("requests{messages,500} = %v, want 0", got)
	}
}

// A client whose connection ends mid-body, closed or reset, has gone away:
// its request is counted as 499, as one that leaves before its answer is,
// not as a 400 of its body's content.
func TestBodyCutShortIsAClientThatLeft(t *testing.T) {
	m := newMesh(t, nil)
	for i, reset := range []bool{false, true} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(m.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: 100000\r\n\r\n{\"messages\":"); err != nil {
			t.Fatal(err)
		}
		// Gone once its handler holds a slot, reading the body: a reset
		// before the server read the headers would be no request at all.
		servicetest.EventuallyWithin(t, 5*time.Second, "the request being read", func() bool { return len(m.svc.inflight) == 1 })
		if reset {
			conn.(*net.TCPConn).SetLinger(0)
		}
		conn.Close()
		servicetest.EventuallyWithin(t, 5*time.Second, "the request counted as 499", func() bool {
			return testutil.ToFloat64(m.svc.metrics.requests.WithLabelValues(apiChat, "499")) == float64(i+1)
		})
	}
	if got := testutil.ToFloat64(m.svc.metrics.requests.WithLabelValues(apiChat, "400")); got != 0 {
		t.Errorf("requests{chat,400} = %v, want 0", got)
	}
}

// A client that closes only its sending side mid-body can still read: it
// gets no answer at all, not net/http's empty 200 (which reads as success).
func TestBodyHalfClosedGetsNoAnswer(t *testing.T) {
	m := newMesh(t, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(m.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100000\r\n\r\n{\"messages\":"); err != nil {
		t.Fatal(err)
	}
	servicetest.EventuallyWithin(t, 5*time.Second, "the request being read", func() bool { return len(m.svc.inflight) == 1 })
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil || len(got) != 0 {
		t.Errorf("read %q (%v), want the connection closed with no answer", got, err)
	}
}

// cutBody yields data, then fails its next read with err, cancelling the
// request's context first when cancel is set, as net/http does when a read
// of the connection fails.
type cutBody struct {
	data   io.Reader
	cancel context.CancelFunc
	err    error
}

func (b *cutBody) Read(p []byte) (int, error) {
	if n, _ := b.data.Read(p); n > 0 {
		return n, nil
	}
	if b.cancel != nil {
		b.cancel()
	}
	return 0, b.err
}

func (b *cutBody) Close() error { return nil }

// A body whose read fails because the connection ended is the client
// leaving: counted as 499, unanswered and not logged; one whose bytes came
// but are not HTTP is still the client's 400, logged at INFO.
func TestBodyReadFailures(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		ended  bool // the connection's read failed: net/http cancels the request
		status string
	}{
		{"closed mid-body", io.ErrUnexpectedEOF, true, "499"},
		{"reset mid-body", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true, "499"},
		{"bad chunking", errors.New("invalid byte in chunk length"), false, "400"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs strings.Builder
			s := &Service{cfg: DefaultConfig(), log: slog.New(slog.NewTextHandler(&logs, nil)),
				metrics: newMetrics(prometheus.NewRegistry(), func(n string) string { return n })}
			h := s.handler(apiChat, func(_ http.ResponseWriter, r *http.Request) error {
				_, err := readBody(r, s.cfg.MaxBodyBytes, requestBody(r, s.cfg.MaxBodyBytes))
				return err
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := &cutBody{data: strings.NewReader(`{"messages":`), err: c.err}
			if c.ended {
				body.cancel = cancel
			}
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", body)
			req.ContentLength = 100000
			w := httptest.NewRecorder()
			aborted := false
			func() {
				defer func() {
					p := recover()
					aborted = p == http.ErrAbortHandler
					if p != nil && !aborted {
						panic(p)
					}
				}()
				h.ServeHTTP(w, req)
			}()
			if aborted != c.ended {
				t.Errorf("response aborted: %v, want %v (a client that left gets no answer, not even net/http's empty 200)", aborted, c.ended)
			}
			for _, code := range []string{"400", "499"} {
				want := 0.0
				if code == c.status {
					want = 1
				}
				if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues(apiChat, code)); got != want {
					t.Errorf("requests{chat,%s} = %v, want %v", code, got, want)
				}
			}
			if strings.Contains(logs.String(), "level=WARN") || strings.Contains(logs.String(), "level=ERROR") {
				t.Errorf("logged as the server's failure:\n%s", logs.String())
			}
			if c.ended && (logs.Len() != 0 || w.Body.Len() != 0) {
				t.Errorf("a client that left: logged %q, answered %q", logs.String(), w.Body.String())
			}
		})
	}
}

// A client that stops sending mid-body gets a 408 after
// --body-read-timeout, and its in-flight slot is free again: a few stalled
// connections cannot make the frontend answer 503 for good.
func TestStalledBodyFreesItsSlot(t *testing.T) {
	m := newMesh(t, func(c *Config, s *fakeShim) {
		c.MaxInflight = 1
		c.BodyReadTimeout = 300 * time.Millisecond
		s.delay = time.Second // each answer outlasts the body's deadline
	})
	status, body := rawPost(t, m.url, "/v1/chat/completions", "Content-Length: 100000\r\n\r\n{\"messages\":[", false)
	if status != http.StatusRequestTimeout || !strings.Contains(body, "did not arrive in time") {
		t.Fatalf("stalled body: %d %s, want a 408", status, body)
	}
	// The slot is free again, and a body read in time lifts the deadline:
	// an answer that outlasts it is not cut.
	resp := post(t, m.url+"/v1/chat/completions", turn1)
	if b := readAll(t, resp.Body); resp.StatusCode != 200 || !strings.Contains(b, "Hello there") {
		t.Fatalf("after the stalled body: %d %s, want its slot free and the whole answer", resp.StatusCode, b)
	}
	m.waitFinish(t)
}

// rawPost writes a POST with headers (ending in the blank line) and a body
// prefix on its own connection, closing its sending side when closeWrite,
// and returns the response's status and body.
func rawPost(t *testing.T, base, path, request string, closeWrite bool) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+request); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		conn.(*net.TCPConn).CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(t, resp.Body)
}

// A compressed body is refused as such (415), not as text that is not UTF-8.
func TestCompressedBodyIs415(t *testing.T) {
	m := newMesh(t, nil)
	resp := post(t, m.url+"/v1/chat/completions", turn1, "Content-Encoding", "gzip")
	if b := readAll(t, resp.Body); resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(b, `"type":"invalid_request_error"`) || !strings.Contains(b, "gzip") {
		t.Errorf("a gzip body: %d %s, want a 415 naming the encoding", resp.StatusCode, b)
	}
	resp = post(t, m.url+"/v1/chat/completions", turn1, "Content-Encoding", "identity")
	if b := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Errorf("Content-Encoding identity: %d %s", resp.StatusCode, b)
	}
	m.waitFinish(t)
}

// A path no API serves is a 404 in its API's shape (Anthropic's under
// /v1/messages/, OpenAI's elsewhere under /v1/), and the admin API's paths
// are still the gateway's.
func TestUnknownPathIs404InTheAPIsShape(t *testing.T) {
	m := newMesh(t, nil)
	for _, c := range []struct{ path, kind string }{
		{"/v1/completions", `"type":"invalid_request_error"`},
		{"/v1/embeddings", `"type":"invalid_request_error"`},
		{"/v1/chat/completions/", `"type":"invalid_request_error"`},
		{"/v1/messages/batches", `"type":"not_found_error"`},
	} {
		resp := post(t, m.url+c.path, turn1)
		if b := readAll(t, resp.Body); resp.StatusCode != http.StatusNotFound || !strings.Contains(b, c.kind) || !strings.Contains(b, "Invalid URL") {
			t.Errorf("POST %s: %d %s, want a 404 %s", c.path, resp.StatusCode, b, c.kind)
		}
	}
	if code, b := getAdmin(t, m, "/v1/admin/sessions"); code != 200 || !strings.Contains(b, "totals") {
		t.Errorf("the admin API through the gateway: %d %s", code, b)
	}
}
