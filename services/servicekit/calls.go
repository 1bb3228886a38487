package servicekit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	callsv1 "switchyard.dev/gen/switchyard/calls/v1"
)

// The server side of switchyard.calls.v1: a client's unary calls carried over
// one long-lived stream (proto/switchyard/calls/v1/calls.proto says why). A
// call over the stream runs the method's own handler through the same unary
// interceptors, in the same order, as the unary call would (interceptors.go),
// so it is authorized, counted, logged and recovered alike; only the trace
// stats handler (traceGRPC), which sees streams, not the calls on them, is
// replaced by a span per call opened here.

// callMethod is one registered unary method: its generated handler and the
// implementation it calls.
type callMethod struct {
	impl    any
	handler grpc.MethodHandler
}

// callServer serves CallService for one Server.
type callServer struct {
	callsv1.UnimplementedCallServiceServer
	log   *slog.Logger
	chain grpc.UnaryServerInterceptor // the server's unary interceptors, composed
	done  <-chan struct{}             // closed when the server starts draining
	work  *callWorkers
	// methods are written while services register, before Serve, and only
	// read once calls arrive.
	mu      sync.RWMutex
	methods map[string]callMethod
}

func newCallServer(log *slog.Logger, interceptors []grpc.UnaryServerInterceptor, done <-chan struct{}) *callServer {
	return &callServer{log: log, chain: chainUnary(interceptors), done: done, work: newCallWorkers(done), methods: map[string]callMethod{}}
}

// add makes desc's unary methods callable over the stream.
func (c *callServer) add(desc *grpc.ServiceDesc, impl any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = callMethod{impl: impl, handler: m.Handler}
	}
}

func (c *callServer) method(name string) (callMethod, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.methods[name]
	return m, ok
}

// Calls runs each call the client sends on a goroutine of its own (a call
// may wait, as Route does for admission; callWorkers keeps the goroutines
// between calls) and sends each answer when it is
// ready. The stream ends when the client ends it (its running calls are
// answered first), when it breaks (they are cancelled) or when the server
// drains: calls that arrive after the drain began are refused UNAVAILABLE at
// once (they did not run, so the client may retry them elsewhere), and the
// stream ends when the running ones have answered.
func (c *callServer) Calls(stream callsv1.CallService_CallsServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	st := &serverCalls{srv: c, stream: stream, running: map[uint64]context.CancelFunc{}}
	received := make(chan error, 1)
	go func() { received <- st.receive(ctx) }()
	var err error
	select {
	case err = <-received:
		if !errors.Is(err, io.EOF) {
			cancel() // the stream broke: nobody will read the answers
		}
	case <-c.done:
	}
	st.stopAndWait()
	st.end()
	if err == nil || errors.Is(err, io.EOF) {
		return nil // draining: the receiving goroutine ends with the stream
	}
	return err
}

// maxStreamCalls bounds the calls running on one stream at once; past it a
// call is refused RESOURCE_EXHAUSTED. Far above what a mesh client keeps in
// flight, it bounds what one peer can make a server hold.
const maxStreamCalls = 4096

// serverCalls is one stream's calls.
type serverCalls struct {
	srv *callServer
	// sendMu serializes the stream's sends (a stream takes one SendMsg at a
	// time); ended, under it, is set once Calls is returning, after which
	// nothing may be sent.
	sendMu sync.Mutex
	ended  bool
	stream callsv1.CallService_CallsServer

	mu      sync.Mutex
	stopped bool
	running map[uint64]context.CancelFunc
	wg      sync.WaitGroup
	unknown bool // an unknown method was asked for (logged once per stream)
}

// receive starts each call and applies each cancellation until the stream
// ends, returning io.EOF when the client closed its side.
func (st *serverCalls) receive(ctx context.Context) error {
	for {
		req, err := st.stream.Recv()
		if err != nil {
			return err
		}
		if req.GetCancel() {
			st.mu.Lock()
			if cancel, ok := st.running[req.GetCallId()]; ok {
				cancel()
			}
			st.mu.Unlock()
			continue
		}
		if req.GetNoAnswer() {
			st.notice(ctx, req)
			continue
		}
		st.mu.Lock()
		var refuse error
		switch _, dup := st.running[req.GetCallId()]; {
		case st.stoppedLocked():
			refuse = status.Error(codes.Unavailable, "servicekit: the server is draining; the call did not run")
		case dup:
			st.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "call id %d is already running on this stream", req.GetCallId())
		case len(st.running) >= maxStreamCalls:
			refuse = status.Errorf(codes.ResourceExhausted, "servicekit: more than %d calls running on one call stream", maxStreamCalls)
		}
		if refuse != nil {
			st.mu.Unlock()
			st.answer(req, nil, refuse)
			continue
		}
		var (
			cctx   context.Context
			cancel context.CancelFunc
		)
		if t := req.GetTimeout(); t != nil {
			cctx, cancel = context.WithTimeout(ctx, t.AsDuration())
		} else {
			cctx, cancel = context.WithCancel(ctx)
		}
		st.running[req.GetCallId()] = cancel
		st.wg.Add(1)
		st.mu.Unlock()
		st.srv.work.run(func() { st.run(cctx, req) })
	}
}

// notice runs a call whose caller waits for no answer, on the receiving
// goroutine, so that it takes effect before the stream's next call starts
// (calls.proto); its failure is logged by the interceptors, as any call's.
// A draining server drops it unrun: nobody could be told it was refused.
// One that runs is counted with the running calls, which a drain waits for,
// and runs to its end though the stream may end meanwhile (it was handed
// over), within the caller's deadline and never longer than maxNoticeTime.
func (st *serverCalls) notice(ctx context.Context, req *callsv1.CallsRequest) {
	st.mu.Lock()
	if st.stoppedLocked() {
		st.mu.Unlock()
		st.srv.log.DebugContext(ctx, "call stream: a notice arrived while draining; dropped", "method", req.GetMethod())
		return
	}
	st.wg.Add(1)
	st.mu.Unlock()
	defer st.wg.Done()
	limit := maxNoticeTime
	if t := req.GetTimeout(); t != nil {
		limit = min(limit, t.AsDuration())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	_, _ = st.srv.call(ctx, st, req)
}

// maxNoticeTime bounds a notice: while one runs, no other call on its
// stream starts, and a notice is meant to return at once.
const maxNoticeTime = 5 * time.Second

// stoppedLocked reports whether the stream takes no more calls: Calls
// stopped it, or the server began to drain, which Calls may not have been
// scheduled to see yet (a call arriving then would run, not be refused).
func (st *serverCalls) stoppedLocked() bool {
	if st.stopped {
		return true
	}
	select {
	case <-st.srv.done:
		return true
	default:
		return false
	}
}

// stopAndWait takes no more calls and waits for the running ones to answer.
func (st *serverCalls) stopAndWait() {
	st.mu.Lock()
	st.stopped = true
	st.mu.Unlock()
	st.wg.Wait()
}

func (st *serverCalls) run(ctx context.Context, req *callsv1.CallsRequest) {
	defer st.wg.Done()
	resp, err := st.srv.call(ctx, st, req)
	// Counted until its answer is out: a client that stops reading holds
	// up at most maxStreamCalls answers, then the stream itself.
	st.answer(req, resp, err)
	st.mu.Lock()
	cancel := st.running[req.GetCallId()]
	delete(st.running, req.GetCallId())
	st.mu.Unlock()
	cancel()
}

// answer sends a call's response or error, unless the stream has ended.
// An answer too large to send fails its own call (RESOURCE_EXHAUSTED, as a
// unary call's would) rather than the stream and every call on it.
func (st *serverCalls) answer(req *callsv1.CallsRequest, resp any, err error) {
	out := &callsv1.CallsResponse{CallId: req.GetCallId()}
	if err == nil {
		out.Response, err = proto.Marshal(resp.(proto.Message))
		if err == nil && proto.Size(out) > maxMsgSize {
			err = status.Errorf(codes.ResourceExhausted, "servicekit: the %s response is larger than %d bytes", req.GetMethod(), maxMsgSize)
		}
	}
	if err != nil {
		out.Response, out.Status = nil, encodeStatus(err)
	}
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	if st.ended {
		return
	}
	// An error here is the stream's, which receive sees too.
	_ = st.stream.Send(out)
}

// end marks the stream ended: no answer is sent after Calls returns.
func (st *serverCalls) end() {
	st.sendMu.Lock()
	st.ended = true
	st.sendMu.Unlock()
}

// encodeStatus is err as a unary call's status would carry it, serialized.
func encodeStatus(err error) []byte {
	s, ok := status.FromError(err)
	if !ok {
		s = status.FromContextError(err) // as a unary call's error becomes its status
	}
	if s.Code() == codes.OK {
		// An error whose status says OK: the unary call's client would get
		// OK and no response, which it fails INTERNAL; encoded as it is, an
		// OK status without a message is no bytes, an answer with neither
		// status nor response, which reads as an empty success.
		s = status.Newf(codes.Internal, "servicekit: the call failed with status OK (%q) and no response", s.Message())
	}
	p := s.Proto()
	// A status message must be UTF-8 to encode; gRPC's own transport
	// would escape it on the wire instead.
	p.Message = strings.ToValidUTF8(p.GetMessage(), "\uFFFD")
	if b, err := proto.Marshal(p); err == nil {
		return b
	}
	b, _ := proto.Marshal(&spb.Status{Code: p.GetCode(), Message: "servicekit: the call's status could not be encoded"})
	return b
}

// call runs one call's method through the server's interceptors, with the
// caller's trace context, in a span of that trace when a tracer provider is
// installed.
func (c *callServer) call(ctx context.Context, st *serverCalls, req *callsv1.CallsRequest) (_ any, err error) {
	m, ok := c.method(req.GetMethod())
	if !ok {
		st.mu.Lock()
		first := !st.unknown
		st.unknown = true
		st.mu.Unlock()
		if first { // unary calls of unknown methods are refused before any interceptor: logged here, once a stream
			c.log.WarnContext(ctx, "call stream: unknown method", "method", req.GetMethod())
		}
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", req.GetMethod())
	}
	if tc := req.GetTraceContext(); len(tc) > 0 {
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(tc))
	}
	// A span only when something records it, as for HTTP requests and
	// unary calls (traceHTTP, traceGRPC): the caller's trace context goes
	// on either way.
	if tracing() {
		var span trace.Span
		ctx, span = otel.Tracer(callTracerName).Start(ctx, req.GetMethod()[1:], trace.WithSpanKind(trace.SpanKindServer))
		defer func() {
			if err != nil {
				span.SetStatus(otelcodes.Error, status.Convert(err).Message())
			}
			span.End()
		}()
	}
	ctx = grpc.NewContextWithServerTransportStream(ctx, callTransport(req.GetMethod()))
	resp, err := m.handler(m.impl, ctx, func(v any) error {
		msg, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "%T is not a protobuf message", v)
		}
		if err := proto.Unmarshal(req.GetRequest(), msg); err != nil {
			return status.Errorf(codes.InvalidArgument, "decoding the %s request: %v", req.GetMethod(), err)
		}
		return nil
	}, c.chain)
	return resp, err
}

// callTracerName names the tracer of the calls' spans, taken from the
// provider installed when the call runs.
const callTracerName = "switchyard.dev/services/servicekit"

// callTransport is what grpc.Method reports inside a call carried by a
// stream. A call over the stream has no headers or trailers of its own.
type callTransport string

func (t callTransport) Method() string { return string(t) }

var errCallHeaders = status.Error(codes.Internal, "servicekit: a call over a call stream carries no headers or trailers")

func (callTransport) SetHeader(metadata.MD) error  { return errCallHeaders }
func (callTransport) SendHeader(metadata.MD) error { return errCallHeaders }
func (callTransport) SetTrailer(metadata.MD) error { return errCallHeaders }

// chainUnary composes interceptors, the first outermost, as
// grpc.ChainUnaryInterceptor does for the server's unary calls.
func chainUnary(interceptors []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for _, ic := range slices.Backward(interceptors) {
			inner := next
			next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, inner) }
		}
		return next(ctx, req)
	}
}
