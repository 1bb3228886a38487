package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit/servicetest"
)

// consoleStreams is how many /console/events handlers are running.
func consoleStreams() int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), ").serveConsoleEvents(")
}

// TestConsoleEventsHead: HEAD /console/events answers the headers and
// ends, so that the client's next request on the same connection (which
// it reuses: a HEAD answer has no body) is answered, and no stream is
// left running for a client that never asked for one.
func TestConsoleEventsHead(t *testing.T) {
	m := newMesh(t, nil)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodHead, m.url+"/console/events", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HEAD: %d %v", resp.StatusCode, resp.Header)
	}
	resp, err = c.Get(m.url + "/console/state")
	if err != nil {
		t.Fatalf("the next request on the connection: %v", err)
	}
	resp.Body.Close()
	servicetest.EventuallyWithin(t, 2*time.Second, "no event stream left running", func() bool { return consoleStreams() == 0 })
}

// TestConsoleEventsEndForAViewerThatDoesNotRead: a viewer that keeps its
// connection open but reads nothing has its stream ended once a frame
// cannot leave within consoleWriteTimeout, rather than holding the
// handler and its copy of the frame for as long as it likes.
func TestConsoleEventsEndForAViewerThatDoesNotRead(t *testing.T) {
	stallConsoleViewer(t, newMesh(t, nil), false)
}

// TestConsoleEventsEndForAViewerThatDoesNotReadTraced: the same with
// OpenTelemetry tracing on, where otelhttp wraps the response writer
// before the console's handler gets it: the write deadline must still
// reach the connection (http.ResponseController unwraps the wrappers).
func TestConsoleEventsEndForAViewerThatDoesNotReadTraced(t *testing.T) {
	// Any installed provider turns servicekit's HTTP tracing on; the
	// process's own is set back after the mesh has stopped.
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tracenoop.NewTracerProvider())
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	stallConsoleViewer(t, newMesh(t, nil), true)
}

// stallConsoleViewer opens /console/events on a connection that reads
// nothing and waits for the stream to end; traced says the stream must run
// inside otelhttp's handler.
func stallConsoleViewer(t *testing.T, m *mesh, traced bool) {
	t.Helper()
	m.svc.console.writeTimeout = 300 * time.Millisecond
	// A state of about 2 MB (200 sessions of 32 turns): more than the
	// socket buffers between the two ends hold.
	m.sched.mu.Lock()
	for i := range consoleSessions * recentTurns {
		m.sched.finishes = append(m.sched.finishes, &schedulerv1.FinishRequestRequest{
			RequestId: fmt.Sprintf("chatcmpl-%024d", i), WorkerId: "worker-7", ToolCallNames: []string{"Read", "Bash"},
			Agent: &agentv1.AgentContext{Tenant: AnonymousTenant, SessionId: fmt.Sprintf("session-%d", i%consoleSessions)}})
	}
	m.sched.mu.Unlock()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(m.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /console/events HTTP/1.1\r\nHost: console\r\n\r\n")
	servicetest.EventuallyWithin(t, 5*time.Second, "the stream started", func() bool { return consoleStreams() == 1 })
	if traced && !strings.Contains(consoleStreamStack(), "otelhttp") {
		t.Fatalf("the stream does not run inside otelhttp's handler:\n%s", consoleStreamStack())
	}
	servicetest.EventuallyWithin(t, 5*time.Second, "the stalled viewer's stream ended", func() bool { return consoleStreams() == 0 })
}

// consoleStreamStack is the stack of a running /console/events handler
// ("" when none runs).
func consoleStreamStack() string {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, ").serveConsoleEvents(") {
			return g
		}
	}
	return ""
}

// TestOutageNotLoggedWhenTheCallerLeft: a call that failed because the
// console viewer or admin client went away is no outage of the peer.
func TestOutageNotLoggedWhenTheCallerLeft(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var o outage
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o.failed(ctx, log, "the peer", context.Canceled)
	o.answered(context.Background(), log, "the peer")
	if buf.Len() != 0 {
		t.Fatalf("logged for a caller that left:\n%s", buf.String())
	}
	// A real failure after it is still logged.
	o.failed(context.Background(), log, "the peer", errors.New("refused"))
	if !strings.Contains(buf.String(), "does not answer") {
		t.Fatalf("a real failure not logged:\n%s", buf.String())
	}
}

// TestConsoleFailureSharedByViewers: while the schedulers do not answer,
// the viewers of one view share the failed gathering as they share a
// state, so that many open consoles still cost the schedulers one
// gathering a second and each viewer gets its "unavailable" frame at once
// rather than after every other viewer's gathering has failed in turn.
func TestConsoleFailureSharedByViewers(t *testing.T) {
	m := newMesh(t, nil)
	m.sched.mu.Lock()
	m.sched.sessionsErr, m.sched.sessionsDelay = status.Error(codes.Unavailable, "down"), 200*time.Millisecond
	m.sched.mu.Unlock()
	const viewers = 5
	errs := make(chan error, viewers)
	for range viewers {
		go func() {
			_, err := m.svc.console.state(context.Background(), "")
			errs <- err
		}()
	}
	for range viewers {
		if err := <-errs; status.Code(err) != codes.Unavailable {
			t.Fatalf("a viewer got %v, want UNAVAILABLE", err)
		}
	}
	m.sched.mu.Lock()
	calls := m.sched.sessionsCalls
	m.sched.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d viewers made %d ListSessions calls within a second, want 1", viewers, calls)
	}
}

// TestConsoleViewerThatLeftFailsOnlyItself: a gathering that failed
// because its own viewer left is not shared with the next viewer.
func TestConsoleViewerThatLeftFailsOnlyItself(t *testing.T) {
	m := newMesh(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.svc.console.state(ctx, ""); err == nil {
		t.Fatal("a gathering for a viewer that left succeeded")
	}
	if _, err := m.svc.console.state(context.Background(), ""); err != nil {
		t.Fatalf("the next viewer got the one that left's failure: %v", err)
	}
}
