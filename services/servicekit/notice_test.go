package servicekit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const slowEchoMethod = "/" + echoServiceName + "/SlowEcho"

// notify makes a NoAnswer call and returns its reply (empty for a notice).
func notify(ctx context.Context, cc grpc.ClientConnInterface, method, in string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(in), out, grpc.StaticMethod(), NoAnswer())
	return out.GetValue(), err
}

// streamAccepted waits until c's stream is open and has answered a call:
// only then are notices sent without waiting.
func streamAccepted(t testing.TB, c *CallConn) {
	t.Helper()
	streamOpen(t, c)
	if _, err := invoke(context.Background(), c, echoMethod, "open"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the call stream accepted", func() bool { s := c.ready(); return s != nil && s.accepted.Load() })
}

// startAccepted is a server and a call connection to it whose stream is
// accepted.
func startAccepted(t testing.TB, opts Options) (*running, *CallConn) {
	t.Helper()
	r := start(t, opts)
	calls := NewCallConn(r.conn)
	streamAccepted(t, calls)
	return r, calls
}

// stillWaiting fails t when done yields within 50 ms: what it waits for
// should still be held up.
func stillWaiting(t testing.TB, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s (%v) while a notice was running", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

func (e *echoService) seen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.values...)
}

// A notice takes effect before any later call on its stream runs: each
// notice here (a slow one) is followed by a quick call, and every notice
// ran before its call. (Run beside the stream's calls, as a call runs, the
// quick call overtakes it.)
func TestNoticesRunBeforeTheStreamsNextCall(t *testing.T) {
	r, calls := startAccepted(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const pairs = 50
	for i := range pairs {
		if out, err := notify(ctx, calls, slowEchoMethod, fmt.Sprintf("notice %d", i)); err != nil || out != "" {
			t.Fatalf("notice %d: %q, %v; want no answer", i, out, err)
		}
		if _, err := invoke(ctx, calls, echoMethod, fmt.Sprintf("call %d", i)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	pos := map[string]int{}
	for i, v := range r.svc.seen() {
		pos[v] = i
	}
	late := 0
	for i := range pairs {
		// Every call has answered: a notice not seen yet is late too.
		if n, ok := pos[fmt.Sprintf("notice %d", i)]; !ok || n > pos[fmt.Sprintf("call %d", i)] {
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d of %d notices had not run when the call sent behind them ran", late, pairs)
	}
}

// A notice's caller does not wait for the server: Invoke returns while the
// notice still runs, and the stream's next call waits behind it.
func TestANoticeIsNotWaitedFor(t *testing.T) {
	r, calls := startAccepted(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := notify(ctx, calls, blockMethod, ""); err != nil {
		t.Fatalf("a notice to Block: %v", err)
	}
	<-r.svc.blockedIn // Invoke returned before this: Block is still running
	answered := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, calls, echoMethod, "behind")
		answered <- err
	}()
	stillWaiting(t, answered, "a call behind a notice answered")
	close(r.svc.release)
	if err := <-answered; err != nil {
		t.Errorf("the call behind the notice: %v", err)
	}
}

// A notice that fails is the server's to log, once, as any failed call:
// its caller hears nothing. Where the call goes unary (no stream yet) it is
// a plain call, waited for, and its caller gets the error.
func TestANoticesFailureIsLoggedByTheServer(t *testing.T) {
	var logs syncBuffer
	r := start(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	calls := NewCallConn(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The first call opens the stream and goes unary meanwhile.
	if _, err := notify(ctx, calls, echoMethod, "fail"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a NoAnswer call made unary: %v, want its FAILED_PRECONDITION", err)
	}
	streamAccepted(t, calls)
	if _, err := notify(ctx, calls, echoMethod, "fail"); err != nil {
		t.Errorf("a failing notice over the stream: %v, want nil (its caller does not wait)", err)
	}
	eventually(t, "both failures logged", func() bool { return strings.Count(logs.String(), "asked to fail") == 2 })
	if got := r.svc.seen(); len(got) != 3 {
		t.Errorf("Echo ran %d times, want 3 (the failing notice twice, the stream's first call)", len(got))
	}
}

// No notice is lost to a server without call streams (an older build),
// which refuses the stream only after the client opened it: notices sent
// while that is not known yet are waited for.
func TestNoticesReachAServerWithoutCallStreams(t *testing.T) {
	svc, conn := startPlain(t)
	calls := NewCallConn(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const notices = 200
	for i := range notices {
		if _, err := notify(ctx, calls, echoMethod, fmt.Sprint(i)); err != nil {
			t.Fatalf("notice %d: %v", i, err)
		}
	}
	if got := len(svc.seen()); got != notices {
		t.Errorf("%d of %d notices reached the server", got, notices)
	}
}

// A notice running when the server begins to drain is waited for, as a
// running call is.
func TestADrainWaitsForARunningNotice(t *testing.T) {
	r, calls := startAccepted(t, Options{ShutdownNotice: -1})
	if _, err := notify(context.Background(), calls, blockMethod, ""); err != nil {
		t.Fatal(err)
	}
	<-r.svc.blockedIn
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	<-r.srv.Done()
	stillWaiting(t, stopped, "the server stopped")
	close(r.svc.release)
	if err := <-stopped; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
