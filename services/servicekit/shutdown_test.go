package servicekit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// slowStreams are the long but finite calls the drain must let finish: an SSE
// response (GET /v1/slow) and a gRPC server stream (Ticks), each sending one tick
// every few milliseconds and using dep for every one, as a handler uses its client
// to a peer. With ticks > 0 a stream sends half its ticks, waits for release (so the
// test knows what is in flight while it looks), then sends the rest; with ticks == 0
// it never ends by itself.
type slowStreams struct {
	ticks   int
	every   time.Duration
	release chan struct{}
	dep     *dependency

	completed atomic.Int32 // handlers that sent every tick
	returned  atomic.Int32 // handlers that returned, however
}

const slowTicksMethod = "/switchyard.test.Slow/Ticks"

var slowDesc = grpc.ServiceDesc{
	ServiceName: "switchyard.test.Slow",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Ticks",
		ServerStreams: true,
		Handler:       func(srv any, ss grpc.ServerStream) error { return srv.(*slowStreams).serveTicks(ss) },
	}},
}

// register is startWith's hook: the gRPC stream must be registered before Serve.
func (s *slowStreams) register(srv *Server) {
	srv.RegisterService(&slowDesc, s)
	srv.HandleHTTP("GET /v1/slow", http.HandlerFunc(s.serveSSE))
}

func (s *slowStreams) run(ctx context.Context, send func(int) error) error {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for i := 0; s.ticks == 0 || i < s.ticks; i++ {
		if s.release != nil && i == s.ticks/2 {
			select {
			case <-s.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.dep.use(); err != nil {
			return err
		}
		if err := send(i); err != nil {
			return err
		}
	}
	return nil
}

func (s *slowStreams) serveSSE(w http.ResponseWriter, r *http.Request) {
	defer s.returned.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	err := s.run(r.Context(), func(i int) error {
		if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err == nil {
		fmt.Fprint(w, "event: done\n\n")
		s.completed.Add(1)
	}
}

func (s *slowStreams) serveTicks(ss grpc.ServerStream) error {
	defer s.returned.Add(1)
	if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		return err
	}
	err := s.run(ss.Context(), func(i int) error { return ss.SendMsg(wrapperspb.Int32(int32(i))) })
	if err != nil {
		return status.FromContextError(err).Err()
	}
	s.completed.Add(1)
	return nil
}

// dependency stands for a client to a peer: a use after Close is what closing clients
// before the drain does to in-flight calls.
type dependency struct {
	mu       sync.Mutex
	closed   bool
	lateUses int
}

var errDependencyClosed = errors.New("dependency closed")

func (d *dependency) use() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.lateUses++
		return errDependencyClosed
	}
	return nil
}

func (d *dependency) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
}

func (d *dependency) usesAfterClose() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lateUses
}

// streamResult is what a client read from one slow stream.
type streamResult struct {
	ticks int
	done  bool // the stream ended normally: "event: done", or io.EOF after the ticks
	err   error
	ended time.Time
}

// readSSE reads GET /v1/slow to its end, calling halfway (once) after half ticks.
func readSSE(client *http.Client, url string, half int, halfway func()) (res streamResult) {
	defer func() { res.ended = time.Now(); halfway() }()
	resp, err := client.Get(url)
	if err != nil {
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return streamResult{err: fmt.Errorf("status %d", resp.StatusCode)}
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "data: "):
			if res.ticks++; res.ticks == half {
				halfway()
			}
		case line == "event: done":
			res.done = true
		}
	}
	res.err = sc.Err()
	return res
}

// readTicks reads a Ticks stream to its end, calling halfway (once) after half ticks.
func readTicks(ctx context.Context, conn *grpc.ClientConn, half int, halfway func()) (res streamResult) {
	defer func() { res.ended = time.Now(); halfway() }()
	stream, err := conn.NewStream(ctx, &slowDesc.Streams[0], slowTicksMethod)
	if err != nil {
		return streamResult{err: err}
	}
	if err := stream.SendMsg(wrapperspb.String("go")); err != nil {
		return streamResult{err: err}
	}
	if err := stream.CloseSend(); err != nil {
		return streamResult{err: err}
	}
	for {
		if err := stream.RecvMsg(new(wrapperspb.Int32Value)); err != nil {
			if err == io.EOF {
				res.done = true
			} else {
				res.err = err
			}
			return res
		}
		if res.ticks++; res.ticks == half {
			halfway()
		}
	}
}

// eventually polls cond until it holds, failing the test if it does not within a
// deadline far beyond what it should take.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The shutdown phases' log messages.
const (
	msgNotServing = "shutdown: health NOT_SERVING"
	msgDraining   = "shutdown: refusing new connections and calls, draining"
	msgDrained    = "shutdown: drained"
	msgCut        = "shutdown: drain cut at the deadline, force-closing what is still in flight"
	msgClosing    = "shutdown: closing clients"
	msgStopped    = "shutdown: stopped"
)

// logLines are the JSON log lines whose message is msg.
func logLines(logs, msg string) []string {
	var lines []string
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `"msg":"`+msg+`"`) {
			lines = append(lines, line)
		}
	}
	return lines
}

func TestShutdownDrainsInFlightCalls(t *testing.T) {
	var logs syncBuffer
	streams := &slowStreams{ticks: 20, every: 2 * time.Millisecond, release: make(chan struct{}), dep: &dependency{}}
	r := startWith(t, Options{
		HTTPAddr: "127.0.0.1:0",
		// Far more than the test needs: a drain that reaches it is a failure.
		ShutdownTimeout: 30 * time.Second,
		Logger:          slog.New(slog.NewJSONHandler(&logs, nil)),
	}, streams.register)
	base := "http://" + r.srv.HTTPAddr()

	// The close hook closes the dependency the streams use; it records what had
	// finished by then.
	var hookSawCompleted, hookSawReturned int32
	hookRan := make(chan struct{})
	r.srv.OnShutdown(func(context.Context) {
		hookSawCompleted, hookSawReturned = streams.completed.Load(), streams.returned.Load()
		streams.dep.Close()
		close(hookRan)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Health watchers: the whole server, and a service it does not have.
	healthClient := healthpb.NewHealthClient(r.conn)
	watch, err := healthClient.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health watch before shutdown: %v, %v", resp.GetStatus(), err)
	}
	unknown, err := healthClient.Watch(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := unknown.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("health watch of an unknown service: %v, %v", resp.GetStatus(), err)
	}

	// In flight when shutdown begins, each past its first half: SSE responses, gRPC
	// streams and a unary call.
	const each = 3
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	results := make(chan streamResult, 2*each)
	var halfway sync.WaitGroup
	halfway.Add(2 * each)
	for range each {
		go func() { results <- readSSE(client, base+"/v1/slow", streams.ticks/2, sync.OnceFunc(halfway.Done)) }()
		go func() { results <- readTicks(ctx, r.conn, streams.ticks/2, sync.OnceFunc(halfway.Done)) }()
	}
	unary := make(chan error, 1)
	go func() {
		unary <- r.conn.Invoke(ctx, "/"+echoServiceName+"/Block", wrapperspb.String("x"), new(wrapperspb.StringValue))
	}()
	<-r.svc.blockedIn
	halfway.Wait()
	if n := streams.returned.Load(); n != 0 {
		t.Fatalf("%d streams ended before shutdown", n)
	}

	r.cancel()

	// 1. NOT_SERVING at once: watchers are told while every call is in flight, and
	// /healthz says so.
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health watch after shutdown began: %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
	rec := httptest.NewRecorder()
	r.srv.serveHealthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/healthz during the drain = %d, want 503", rec.Code)
	}

	// 2. Refused: new connections once Done is closed (both listeners are by then),
	// new calls on an existing connection as soon as its GOAWAY arrives.
	select {
	case <-r.srv.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed")
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := fresh.Get(base + "/v1/slow"); err == nil {
		resp.Body.Close()
		t.Error("a new HTTP connection was accepted during the drain")
	}
	freshConn, err := Dial(r.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer freshConn.Close()
	if err := freshConn.Invoke(ctx, "/"+echoServiceName+"/Echo", wrapperspb.String("new"), new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
		t.Errorf("a call on a new connection during the drain: %v, want Unavailable", err)
	}
	eventually(t, "a new call on an existing connection is refused", func() bool {
		err := r.conn.Invoke(ctx, "/"+echoServiceName+"/Echo", wrapperspb.String("new"), new(wrapperspb.StringValue))
		return status.Code(err) == codes.Unavailable
	})
	// The health watches end (they would hold the drain otherwise); nothing in flight
	// has ended, and the close hook has not run.
	for name, w := range map[string]healthpb.Health_WatchClient{"server": watch, "unknown service": unknown} {
		if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("%s health watch during the drain: %v, want Unavailable", name, err)
		}
	}
	if n := streams.returned.Load(); n != 0 {
		t.Fatalf("%d in-flight streams ended before they were let finish", n)
	}
	select {
	case <-hookRan:
		t.Fatal("the close hook ran while calls were in flight")
	default:
	}

	// 3. Drain: every call finishes, every tick of it.
	close(streams.release)
	close(r.svc.release)
	for range 2 * each {
		if res := <-results; res.err != nil || !res.done || res.ticks != streams.ticks {
			t.Errorf("in-flight stream: %d/%d ticks, done %v, err %v", res.ticks, streams.ticks, res.done, res.err)
		}
	}
	if err := <-unary; err != nil {
		t.Errorf("in-flight unary call: %v", err)
	}
	if err := r.stop(); err != nil {
		t.Errorf("Serve = %v", err)
	}

	// 4. The close hook ran once they had all returned; nothing used the dependency
	// after it closed.
	<-hookRan
	if hookSawCompleted != 2*each || hookSawReturned != 2*each {
		t.Errorf("close hook ran with %d streams completed and %d returned, want %d", hookSawCompleted, hookSawReturned, 2*each)
	}
	if n := streams.dep.usesAfterClose(); n != 0 {
		t.Errorf("dependency used %d times after the close hook", n)
	}

	got := logs.String()
	for _, msg := range []string{msgNotServing, msgDraining, msgDrained, msgClosing, msgStopped} {
		if n := len(logLines(got, msg)); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", msg, n, got)
		}
	}
	if n := len(logLines(got, msgCut)); n != 0 {
		t.Errorf("a drain within the timeout logged a cut:\n%s", got)
	}
}

// During ShutdownNotice the server is NOT_SERVING yet goes on answering, on
// existing connections and on new ones: a peer that learns of the shutdown from
// its next health check is not refused meanwhile. Only then does it stop
// accepting.
func TestShutdownNoticeKeepsServingUntilPeersNotice(t *testing.T) {
	const notice = time.Second // the margin for the calls below on a loaded machine
	var logs syncBuffer
	r := start(t, Options{ShutdownNotice: notice, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch, err := healthpb.NewHealthClient(r.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health watch before shutdown: %v, %v", resp.GetStatus(), err)
	}

	began := time.Now()
	r.cancel()
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health watch after shutdown began: %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
	if err := r.conn.Invoke(ctx, "/"+echoServiceName+"/Echo", wrapperspb.String("old"), new(wrapperspb.StringValue)); err != nil {
		t.Errorf("a call on an existing connection during the notice: %v", err)
	}
	fresh, err := Dial(r.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := fresh.Invoke(ctx, "/"+echoServiceName+"/Echo", wrapperspb.String("new"), new(wrapperspb.StringValue)); err != nil {
		t.Errorf("a call on a new connection during the notice: %v", err)
	}
	select {
	case <-r.srv.Done():
		t.Fatal("Done closed during the notice")
	default:
	}

	if err := r.stop(); err != nil {
		t.Errorf("Serve = %v", err)
	}
	// Only a lower bound: a loaded machine can only stretch it.
	if took := time.Since(began); took < notice {
		t.Errorf("shutdown took %v, less than the %v notice", took, notice)
	}
	got := logs.String()
	if lines := logLines(got, msgNotServing); len(lines) != 1 || !strings.Contains(lines[0], `"notice":"1s"`) {
		t.Errorf("NOT_SERVING logged as %q, want once with the notice:\n%s", lines, got)
	}
}

// The notice is part of ShutdownTimeout: a notice longer than the timeout is
// cut at its deadline, and shutdown goes on.
func TestShutdownNoticeEndsAtTheDeadline(t *testing.T) {
	r := start(t, Options{ShutdownNotice: time.Hour, ShutdownTimeout: 50 * time.Millisecond})
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown still waiting for its notice long after the timeout")
	}
}

func TestShutdownCutsStreamsAtDeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	var logs syncBuffer
	streams := &slowStreams{every: 2 * time.Millisecond, dep: &dependency{}} // never end
	r := startWith(t, Options{
		HTTPAddr:        "127.0.0.1:0",
		ShutdownTimeout: timeout,
		Logger:          slog.New(slog.NewJSONHandler(&logs, nil)),
	}, streams.register)
	var hookSawReturned int32
	r.srv.OnShutdown(func(context.Context) {
		hookSawReturned = streams.returned.Load()
		streams.dep.Close()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	results := make(chan streamResult, 2)
	var halfway sync.WaitGroup
	halfway.Add(2)
	go func() {
		results <- readSSE(client, "http://"+r.srv.HTTPAddr()+"/v1/slow", 5, sync.OnceFunc(halfway.Done))
	}()
	go func() { results <- readTicks(ctx, r.conn, 5, sync.OnceFunc(halfway.Done)) }()
	halfway.Wait()

	began := time.Now()
	r.cancel()
	for range 2 {
		res := <-results
		if res.done || res.err == nil {
			t.Errorf("a stream longer than the shutdown timeout ended cleanly (%d ticks)", res.ticks)
		}
		if took := res.ended.Sub(began); took < timeout {
			t.Errorf("stream cut %v after shutdown began, before the %v timeout", took, timeout)
		}
	}
	if err := r.stop(); err != nil {
		t.Errorf("Serve = %v", err)
	}
	if hookSawReturned != 2 {
		t.Errorf("close hook ran with %d of 2 cut handlers returned", hookSawReturned)
	}
	if n := streams.dep.usesAfterClose(); n != 0 {
		t.Errorf("dependency used %d times after the close hook", n)
	}

	got := logs.String()
	cut := logLines(got, msgCut)
	if len(cut) != 1 {
		t.Fatalf("%q logged %d times, want once:\n%s", msgCut, len(cut), got)
	}
	if !strings.Contains(cut[0], `"http_in_flight":1,"grpc_in_flight":1`) {
		t.Errorf("the cut does not say what it cut (one HTTP request, one RPC): %s", cut[0])
	}
	for _, msg := range []string{msgNotServing, msgDraining, msgClosing, msgStopped} {
		if n := len(logLines(got, msg)); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", msg, n, got)
		}
	}
	if n := len(logLines(got, msgDrained)); n != 0 {
		t.Errorf("a cut drain logged as drained:\n%s", got)
	}
}
