package servicekit

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	echoMethod  = "/" + echoServiceName + "/Echo"
	blockMethod = "/" + echoServiceName + "/Block"
	boomMethod  = "/" + echoServiceName + "/Boom"
)

func invoke(ctx context.Context, cc grpc.ClientConnInterface, method, in string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(in), out, grpc.StaticMethod())
	return out.GetValue(), err
}

// A call over a call stream answers what the unary call answers: the
// response, or the status with its code, message and details, a panic
// recovered as INTERNAL, an unknown method UNIMPLEMENTED.
func TestCallConnAnswersAsUnary(t *testing.T) {
	r := start(t, Options{})
	calls := NewCallConn(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tt := range []struct{ method, in string }{
		{echoMethod, "hello"},
		{echoMethod, "fail"},
		{boomMethod, "x"},
		{"/" + echoServiceName + "/Missing", "x"},
	} {
		wantOut, wantErr := invoke(ctx, r.conn, tt.method, tt.in)
		gotOut, gotErr := invoke(ctx, calls, tt.method, tt.in)
		if gotOut != wantOut || status.Code(gotErr) != status.Code(wantErr) {
			t.Errorf("%s(%q): over the stream %q, %v; unary %q, %v", tt.method, tt.in, gotOut, gotErr, wantOut, wantErr)
		}
		if tt.method == echoMethod && !proto.Equal(status.Convert(gotErr).Proto(), status.Convert(wantErr).Proto()) {
			t.Errorf("%s(%q): status over the stream %v, unary %v", tt.method, tt.in, status.Convert(gotErr).Proto(), status.Convert(wantErr).Proto())
		}
	}
	r.svc.mu.Lock()
	via := append([]bool(nil), r.svc.viaCalls...)
	r.svc.mu.Unlock()
	if want := []bool{false, true, false, true}; !equalBools(via, want) {
		t.Errorf("Echo calls came over a call stream: %v, want %v (unary, stream, unary, stream)", via, want)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The caller's trace reaches the handler: its span is a child of the caller's.
func TestCallConnCarriesTheTrace(t *testing.T) {
	r := start(t, Options{})
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	if _, err := invoke(ctx, NewCallConn(r.conn), echoMethod, "traced"); err != nil {
		t.Fatal(err)
	}
	r.svc.mu.Lock()
	defer r.svc.mu.Unlock()
	if got := r.svc.traceIDs[len(r.svc.traceIDs)-1]; got != traceID {
		t.Errorf("the handler saw trace %s, want the caller's %s", got, traceID)
	}
}

// The caller's deadline and cancellation reach the handler, and a call that
// stopped waiting leaves nothing running on the server.
func TestCallConnDeadlineAndCancel(t *testing.T) {
	r := start(t, Options{})
	calls := NewCallConn(r.conn)

	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := invoke(ctx, calls, blockMethod, "")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Block with a 100 ms deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	<-r.svc.blockedIn
	r.svc.mu.Lock()
	d := r.svc.deadline
	r.svc.mu.Unlock()
	// A timeout travels, as gRPC's own does, so the server's deadline is
	// later by the time in transit.
	if d.IsZero() || d.Before(sent) || d.After(sent.Add(150*time.Millisecond)) {
		t.Errorf("the handler's deadline %v, want the caller's, about 100 ms after %v", d, sent)
	}

	ctx, cancel = context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, calls, blockMethod, "")
		errc <- err
	}()
	<-r.svc.blockedIn
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled Block: %v, want CANCELED", err)
	}
	// What is left in flight is the stream itself: the handlers saw their
	// contexts end and returned.
	eventually(t, "only the call stream in flight", func() bool { return r.srv.grpcCalls.count() == 1 })

	// The stream is still good for the next call.
	if out, err := invoke(context.Background(), calls, echoMethod, "after"); err != nil || out != "echo: after" {
		t.Errorf("Echo after the cancellations: %q, %v", out, err)
	}
}

// A draining server answers the calls running on a stream, then ends it.
func TestCallConnDrain(t *testing.T) {
	r := start(t, Options{ShutdownNotice: -1})
	calls := NewCallConn(r.conn)
	type result struct {
		out string
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, err := invoke(context.Background(), calls, blockMethod, "")
		res <- result{out, err}
	}()
	<-r.svc.blockedIn
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	<-r.srv.Done() // draining: the running call is still waited for
	close(r.svc.release)
	if got := <-res; got.err != nil || got.out != "released" {
		t.Errorf("Block running when the drain began: %q, %v; want its answer", got.out, got.err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := invoke(context.Background(), calls, echoMethod, "late"); status.Code(err) != codes.Unavailable {
		t.Errorf("a call after the server stopped: %v, want UNAVAILABLE", err)
	}
}

// A server without call streams (an older build) is called unary, and a
// stream that breaks fails its waiting calls UNAVAILABLE.
func TestCallConnFallbackAndBreak(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.NewServer()
	svc := &echoService{blockedIn: make(chan struct{}, 1), release: make(chan struct{})}
	plain.RegisterService(&echoDesc, svc)
	go plain.Serve(lis)
	defer plain.Stop()
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	calls := NewCallConn(conn)
	for range 2 {
		if out, err := invoke(context.Background(), calls, echoMethod, "old"); err != nil || out != "echo: old" {
			t.Fatalf("Echo on a server without call streams: %q, %v", out, err)
		}
	}
	if !calls.unaryOnly.Load() {
		t.Error("the connection did not fall back to unary calls")
	}

	r := start(t, Options{})
	calls = NewCallConn(r.conn)
	errc := make(chan error, 1)
	go func() {
		_, err := invoke(context.Background(), calls, blockMethod, "")
		errc <- err
	}()
	<-r.svc.blockedIn
	r.srv.grpc.Stop() // the connection breaks under the waiting call
	err = <-errc
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a call waiting when the connection broke: %v, want UNAVAILABLE", err)
	}
	if errors.Is(err, errNoCallService) {
		t.Error("a broken stream was taken for a server without call streams")
	}
}
