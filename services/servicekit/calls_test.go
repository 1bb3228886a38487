package servicekit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	callsv1 "switchyard.dev/gen/switchyard/calls/v1"
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

// streamOpen waits until c's stream is open: the first call goes unary
// while it opens.
func streamOpen(t testing.TB, c *CallConn) {
	t.Helper()
	eventually(t, "the call stream open", func() bool { return c.ready() != nil })
}

// A call over a call stream answers what the unary call answers: the
// response, or the status with its code, message and details, a panic
// recovered as INTERNAL, an unknown method UNIMPLEMENTED; the health
// service answers over it too.
func TestCallConnAnswersAsUnary(t *testing.T) {
	r := start(t, Options{})
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := CheckHealth(ctx, calls); err != nil {
		t.Errorf("a health check over the call stream: %v", err)
	}
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

// callerTrace is a context whose span is a caller's, sampled.
func callerTrace(t testing.TB) (context.Context, trace.SpanContext) {
	t.Helper()
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

// lastSpan is the span context the latest Echo saw.
func (e *echoService) lastSpan() trace.SpanContext {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.spans[len(e.spans)-1]
}

// The caller's trace reaches the handler. While no tracer provider is
// installed (the process's start; TestCallStreamSpansWhenTraced has one) no
// span is made for the call: the handler sees the caller's span itself.
func TestCallConnCarriesTheTrace(t *testing.T) {
	r := start(t, Options{})
	ctx, caller := callerTrace(t)
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)
	if _, err := invoke(ctx, calls, echoMethod, "traced"); err != nil {
		t.Fatal(err)
	}
	got := r.svc.lastSpan()
	if got.TraceID() != caller.TraceID() {
		t.Errorf("the handler saw trace %s, want the caller's %s", got.TraceID(), caller.TraceID())
	}
	if !tracing() && got.SpanID() != caller.SpanID() {
		t.Errorf("untraced, the handler saw span %s, want the caller's %s (no span of the call's own)", got.SpanID(), caller.SpanID())
	}

	// Without a trace the call carries none, and the handler sees none.
	if _, err := invoke(context.Background(), calls, echoMethod, "untraced"); err != nil {
		t.Fatal(err)
	}
	if got := r.svc.lastSpan(); got.IsValid() {
		t.Errorf("a call without a trace reached its handler with span %s/%s", got.TraceID(), got.SpanID())
	}
}

// The caller's deadline and cancellation reach the handler, and a call that
// stopped waiting leaves nothing running on the server.
func TestCallConnDeadlineAndCancel(t *testing.T) {
	r := start(t, Options{})
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)

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
	// later by the time in transit: on a loaded machine that can be tens of
	// milliseconds, so the upper bound only tells the caller's deadline from
	// none or the server's own.
	if d.IsZero() || d.Before(sent.Add(90*time.Millisecond)) || d.After(sent.Add(time.Second)) {
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

// A draining server answers the calls running on a stream, refuses new ones
// at once, then ends it.
func TestCallConnDrain(t *testing.T) {
	r := start(t, Options{ShutdownNotice: -1})
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)
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
	refused := time.Now()
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer dcancel()
	if _, err := invoke(dctx, calls, echoMethod, "during the drain"); status.Code(err) != codes.Unavailable || time.Since(refused) > time.Second {
		t.Errorf("a call during the drain: %v after %v, want UNAVAILABLE at once", err, time.Since(refused))
	}
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

// startPlain serves the echo service on a plain gRPC server, one without
// call streams (an older build), until the test ends.
func startPlain(t *testing.T) (*echoService, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.NewServer()
	svc := &echoService{blockedIn: make(chan struct{}, 1), release: make(chan struct{})}
	plain.RegisterService(&echoDesc, svc)
	go plain.Serve(lis)
	t.Cleanup(plain.Stop)
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return svc, conn
}

// A server without call streams (an older build) is called unary, and a
// stream that breaks fails its waiting calls UNAVAILABLE.
func TestCallConnFallbackAndBreak(t *testing.T) {
	_, conn := startPlain(t)
	calls := NewCallConn(conn)
	for range 2 {
		if out, err := invoke(context.Background(), calls, echoMethod, "old"); err != nil || out != "echo: old" {
			t.Fatalf("Echo on a server without call streams: %q, %v", out, err)
		}
	}
	eventually(t, "the connection falling back to unary calls", func() bool { return calls.unaryUntil.Load() > time.Now().UnixNano() })

	r := start(t, Options{})
	calls = NewCallConn(r.conn)
	streamOpen(t, calls)
	errc := make(chan error, 1)
	go func() {
		_, err := invoke(context.Background(), calls, blockMethod, "")
		errc <- err
	}()
	<-r.svc.blockedIn
	r.srv.grpc.Stop() // the connection breaks under the waiting call
	err := <-errc
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a call waiting when the connection broke: %v, want UNAVAILABLE", err)
	}
	if errors.Is(err, errNoCallService) {
		t.Error("a broken stream was taken for a server without call streams")
	}
}

// A call never waits past its deadline for the stream: not while the
// connection is still connecting (to a peer that accepts and never
// answers), and not behind a send that the peer's flow control holds up.
func TestCallConnKeepsDeadlines(t *testing.T) {
	t.Run("connecting", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var held []net.Conn
		accepted := make(chan struct{})
		go func() {
			defer close(accepted)
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				held = append(held, c) // never answers the HTTP/2 preface
			}
		}()
		conn, err := Dial(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		began := time.Now()
		_, err = invoke(ctx, NewCallConn(conn), echoMethod, "x")
		if took := time.Since(began); status.Code(err) != codes.DeadlineExceeded || took > time.Second {
			t.Errorf("a call with a 100 ms deadline to a peer that never answers: %v after %v, want DEADLINE_EXCEEDED after 100 ms", err, took)
		}
		conn.Close()
		lis.Close()
		<-accepted
		for _, c := range held {
			c.Close()
		}
	})
	t.Run("stalled send", func(t *testing.T) {
		r := start(t, Options{})
		p := newStallProxy(t, r.srv.GRPCAddr())
		conn, err := Dial(p.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		calls := NewCallConn(conn)
		streamOpen(t, calls)
		// More than the connection's flow-control window (connWindow) lets
		// through: its send blocks. Built first, so that the allocation
		// (slow under the race detector) is not in the timed part.
		huge := strings.Repeat("x", connWindow+4<<20)
		p.stall()
		big := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := invoke(ctx, calls, echoMethod, huge)
			big <- err
		}()
		time.Sleep(200 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		began := time.Now()
		_, err = invoke(ctx, calls, echoMethod, "small")
		if took := time.Since(began); status.Code(err) != codes.DeadlineExceeded || took > time.Second {
			t.Errorf("a small call behind a stalled send: %v after %v, want DEADLINE_EXCEEDED after 100 ms", err, took)
		}
		select {
		case err := <-big:
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("the stalled call: %v, want DEADLINE_EXCEEDED", err)
			}
		case <-time.After(3 * time.Second):
			t.Error("the stalled call outlived its 1 s deadline by 2 s")
		}
		p.close()
	})
}

// stallProxy forwards a connection until stall, then stops reading from
// the client, as a paused or partitioned peer does.
type stallProxy struct {
	lis     net.Listener
	mu      sync.Mutex
	stalled chan struct{}
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{lis: lis, stalled: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
			go func() {
				defer p.wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					select {
					case <-p.stalled:
						return // reads no more; close ends the connection
					default:
					}
					if n > 0 {
						_, _ = s.Write(buf[:n])
					}
					if err != nil {
						s.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *stallProxy) addr() string { return p.lis.Addr().String() }
func (p *stallProxy) stall()       { close(p.stalled) }

func (p *stallProxy) close() {
	p.lis.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// An answer that cannot travel fails its own call as a unary call's would:
// a response over the message bound (RESOURCE_EXHAUSTED, the other calls on
// the stream unharmed), a status whose message is not UTF-8 (its code kept),
// an error whose status says OK (INTERNAL: no response, not an empty one).
func TestCallConnAnswersThatCannotTravel(t *testing.T) {
	method := func(name string, h func() (any, error)) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(wrapperspb.StringValue)); err != nil {
				return nil, err
			}
			return icpt(ctx, nil, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/switchyard.test.Odd/" + name}, func(context.Context, any) (any, error) { return h() })
		}}
	}
	desc := grpc.ServiceDesc{ServiceName: "switchyard.test.Odd", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{
		method("Big", func() (any, error) { return wrapperspb.String(strings.Repeat("y", maxMsgSize+1)), nil }),
		method("BadStatus", func() (any, error) { return nil, status.Error(codes.NotFound, "no such thing: \xff\xfe") }),
		method("FailOK", func() (any, error) { return nil, okError("failed, says OK") }),
		method("FailOKSilently", func() (any, error) { return nil, okError("") }),
	}}
	r := startWith(t, Options{}, func(s *Server) { s.RegisterService(&desc, struct{}{}) })
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	other := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, calls, blockMethod, "")
		other <- err
	}()
	<-r.svc.blockedIn
	if _, err := invoke(ctx, calls, "/switchyard.test.Odd/Big", "x"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a response over the bound: %v, want RESOURCE_EXHAUSTED", err)
	}
	select {
	case err := <-other:
		t.Errorf("a call running beside the oversized answer ended with it: %v", err)
	case r.svc.release <- struct{}{}:
		if err := <-other; err != nil {
			t.Errorf("a call running beside the oversized answer: %v", err)
		}
	}

	_, unary := invoke(ctx, r.conn, "/switchyard.test.Odd/BadStatus", "x")
	_, viaStream := invoke(ctx, calls, "/switchyard.test.Odd/BadStatus", "x")
	if status.Code(viaStream) != status.Code(unary) || status.Code(unary) != codes.NotFound {
		t.Errorf("a status that is not UTF-8: over the stream %v, unary %v, want NOT_FOUND both", viaStream, unary)
	}
	if msg := status.Convert(viaStream).Message(); !strings.HasPrefix(msg, "no such thing: ") {
		t.Errorf("a status that is not UTF-8: message over the stream %q, want the handler's, made valid", msg)
	}

	for _, m := range []string{"FailOK", "FailOKSilently"} {
		_, unary := invoke(ctx, r.conn, "/switchyard.test.Odd/"+m, "x")
		_, viaStream := invoke(ctx, calls, "/switchyard.test.Odd/"+m, "x")
		if status.Code(viaStream) != codes.Internal || status.Code(unary) != codes.Internal {
			t.Errorf("%s, an error whose status is OK: over the stream %v, unary %v, want INTERNAL both", m, viaStream, unary)
		}
	}
}

// okError is an error whose gRPC status says OK.
type okError string

func (e okError) Error() string              { return string(e) }
func (e okError) GRPCStatus() *status.Status { return status.New(codes.OK, string(e)) }

// An answer is a response, or a status that is not OK (from a server of
// another build too); one with neither is a response of no bytes.
func TestDecodeAnswer(t *testing.T) {
	enc := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		answer *callsv1.CallsResponse
		want   string
		code   codes.Code
	}{
		{"a response", &callsv1.CallsResponse{Response: enc(wrapperspb.String("hi"))}, "hi", codes.OK},
		{"a response of no bytes", &callsv1.CallsResponse{}, "", codes.OK},
		{"a failure", &callsv1.CallsResponse{Status: enc(&spb.Status{Code: int32(codes.NotFound), Message: "gone"})}, "", codes.NotFound},
		{"status OK", &callsv1.CallsResponse{Status: enc(&spb.Status{Message: "fine?"})}, "", codes.Internal},
		{"status OK beside a response", &callsv1.CallsResponse{Status: enc(&spb.Status{Message: "fine?"}), Response: enc(wrapperspb.String("hi"))}, "", codes.Internal},
		{"a status that does not decode", &callsv1.CallsResponse{Status: []byte{0xff}}, "", codes.Internal},
	} {
		out := new(wrapperspb.StringValue)
		err := decodeAnswer(tc.answer, out)
		if status.Code(err) != tc.code || out.GetValue() != tc.want {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, out.GetValue(), err, tc.want, tc.code)
		}
	}
}

// A call made just after the stream ended, before the connection noticed,
// is answered (as a unary call) instead of failing with the old stream.
func TestCallConnAfterTheStreamEnded(t *testing.T) {
	r := start(t, Options{})
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)
	for range 20 {
		s := calls.ready()
		if s == nil {
			streamOpen(t, calls)
			continue
		}
		s.cancel() // the stream ends; the connection is fine
		<-s.dead
		// Until the CallConn forgets it, a call may still find the ended
		// stream: it must learn that the call never went out.
		if err := s.call(context.Background(), 1, echoMethod, nil, new(wrapperspb.StringValue)); !errors.Is(err, errNotSent) {
			t.Fatalf("a call on an ended stream: %v, want errNotSent (made unary)", err)
		}
		if out, err := invoke(context.Background(), calls, echoMethod, "next"); err != nil || out != "echo: next" {
			t.Fatalf("a call right after the stream ended: %q, %v", out, err)
		}
	}
}

// A call's own metadata reaches the handler as it would unary: a call
// stream has no headers per call, so such a call goes unary rather than
// arrive without them (or with the stream's).
func TestCallConnKeepsTheCallsMetadata(t *testing.T) {
	const key = "x-switchyard-test"
	desc := grpc.ServiceDesc{ServiceName: "switchyard.test.Meta", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(wrapperspb.StringValue)); err != nil {
				return nil, err
			}
			return icpt(ctx, nil, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/switchyard.test.Meta/Get"}, func(ctx context.Context, _ any) (any, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				return wrapperspb.String(strings.Join(md.Get(key), ",")), nil
			})
		},
	}}}
	r := startWith(t, Options{}, func(s *Server) { s.RegisterService(&desc, struct{}{}) })
	calls := NewCallConn(r.conn)
	streamOpen(t, calls)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := invoke(metadata.AppendToOutgoingContext(ctx, key, "v1"), calls, "/switchyard.test.Meta/Get", ""); err != nil || out != "v1" {
		t.Errorf("a call with metadata %s=v1 saw %q, %v; want v1", key, out, err)
	}
	if out, err := invoke(ctx, calls, "/switchyard.test.Meta/Get", ""); err != nil || out != "" {
		t.Errorf("a call without metadata saw %q, %v; want none", out, err)
	}
}

// heldStream is a call stream's client side whose sends wait for release,
// as behind a large message the peer's flow control holds up.
type heldStream struct {
	callsv1.CallService_CallsClient // nil: only Send and Recv are used
	sending                         chan struct{}
	release                         chan struct{}
	sent                            chan *callsv1.CallsRequest
	closed                          chan struct{}
}

func (h *heldStream) Send(r *callsv1.CallsRequest) error {
	h.sending <- struct{}{}
	<-h.release
	h.sent <- r
	return nil
}

func (h *heldStream) Recv() (*callsv1.CallsResponse, error) {
	<-h.closed
	return nil, io.EOF
}

// A call that stops waiting while the stream's sender is busy and its
// queue full still has its cancellation reach the server once the sender
// frees up: dropped, a call without a deadline would run there for ever.
func TestCallConnCancelsBehindABusySender(t *testing.T) {
	h := &heldStream{sending: make(chan struct{}, 2*sendQueue), release: make(chan struct{}),
		sent: make(chan *callsv1.CallsRequest, 2*sendQueue), closed: make(chan struct{})}
	s := &clientCalls{stream: h, cancel: func() {}, pending: map[uint64]chan *callsv1.CallsResponse{},
		queue: make(chan *callsv1.CallsRequest, sendQueue), dead: make(chan struct{})}
	go s.send()
	go s.receive()
	defer close(h.closed)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.call(ctx, 1, echoMethod, nil, new(wrapperspb.StringValue)) }()
	<-h.sending // the call is out; the sender is held
	for id := uint64(2); id < 2+sendQueue; id++ {
		if err := s.notify(context.Background(), id, echoMethod, nil); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call: %v, want CANCELED", err)
	}
	close(h.release)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case r := <-h.sent:
			if r.GetCancel() && r.GetCallId() == 1 {
				return
			}
		case <-timeout:
			t.Fatal("the call's cancellation never went out")
		}
	}
}

// fakeCallsStream is a server's side of a call stream that receives reqs,
// then the client's end, and keeps what is sent.
type fakeCallsStream struct {
	grpc.ServerStream
	reqs []*callsv1.CallsRequest
	mu   sync.Mutex
	sent []*callsv1.CallsResponse
}

func (f *fakeCallsStream) Context() context.Context { return context.Background() }

func (f *fakeCallsStream) Recv() (*callsv1.CallsRequest, error) {
	if len(f.reqs) == 0 {
		return nil, io.EOF
	}
	r := f.reqs[0]
	f.reqs = f.reqs[1:]
	return r, nil
}

func (f *fakeCallsStream) Send(r *callsv1.CallsResponse) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, r)
	return nil
}

// A call that arrives once the server has begun to drain is refused even
// before the stream's Calls has seen the drain: under load its goroutine
// may not yet have run, and the call ran (TestCallConnDrain failed so).
func TestCallsRefusedOnceTheDrainBegan(t *testing.T) {
	done := make(chan struct{})
	close(done)
	srv := newCallServer(slog.New(slog.DiscardHandler), nil, done)
	stream := &fakeCallsStream{reqs: []*callsv1.CallsRequest{{CallId: 1, Method: echoMethod}}}
	st := &serverCalls{srv: srv, stream: stream, running: map[uint64]context.CancelFunc{}}
	if err := st.receive(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("receive: %v, want the client's end (EOF)", err)
	}
	st.stopAndWait()
	if len(stream.sent) != 1 {
		t.Fatalf("sent %d answers, want 1", len(stream.sent))
	}
	var s spb.Status
	if err := proto.Unmarshal(stream.sent[0].GetStatus(), &s); err != nil || codes.Code(s.GetCode()) != codes.Unavailable {
		t.Errorf("the call's answer: %v (%v), want UNAVAILABLE without running it", codes.Code(s.GetCode()), err)
	}
}
