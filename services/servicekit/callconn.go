package servicekit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	callsv1 "switchyard.dev/gen/switchyard/calls/v1"
)

// CallConn is a connection whose unary calls travel over one long-lived
// CallService stream (calls.go, proto/switchyard/calls/v1) instead of one
// HTTP/2 stream each; its streaming calls go out as they are. Generated
// clients take it in place of the *grpc.ClientConn it wraps:
//
//	client := schedulerv1.NewSchedulerServiceClient(servicekit.NewCallConn(conn))
//
// A call answers what the unary call would: the same response, or the same
// status (code, message, details), with the caller's deadline and
// cancellation carried to the server, and it never waits past its own
// deadline, whatever the stream is doing. The stream is opened in the
// background: until it is open (the first call, after a break, while the
// connection is still connecting) calls go unary. When the stream breaks,
// the calls waiting on it fail UNAVAILABLE, as unary calls on a broken
// connection do. A server without CallService (an older build) gets unary
// calls for unaryFor after each refusal. Calls with call options (other than
// the generated clients' own and NoAnswer) and requests too large to wrap go
// unary too, and so do calls whose context carries outgoing metadata (a
// call over the stream has no headers of its own). Closing the wrapped
// connection ends the stream.
type CallConn struct {
	cc         *grpc.ClientConn
	unaryUntil atomic.Int64 // unix ns: the server refused the stream; unary until then
	ids        atomic.Uint64

	mu       sync.Mutex
	cur      *clientCalls // the open stream; nil when there is none
	opening  bool         // a goroutine is opening one
	nextOpen time.Time    // no new attempt before this, after a failed one
}

// NewCallConn wraps cc.
func NewCallConn(cc *grpc.ClientConn) *CallConn { return &CallConn{cc: cc} }

const (
	// maxWrapped is the largest request sent over the stream: its envelope
	// must stay under the transport's message bound (maxMsgSize).
	maxWrapped = maxMsgSize - 1<<16
	// unaryFor is how long a refused stream is not asked for again, so that
	// a mesh upgraded server by server takes to the streams on its own.
	unaryFor = time.Minute
	// reopenAfter spaces the attempts to open a stream on a connection
	// that cannot (its calls go unary meanwhile).
	reopenAfter = 100 * time.Millisecond
	// sendQueue is how many requests may wait for the sender: room for a
	// burst of calls and their cancellations while one large send is out.
	sendQueue = 64
)

// NoAnswer makes a call a notice where it travels over a call stream:
// Invoke returns once the call is handed to the stream's sender, without
// waiting for the server, which runs it before the stream's next call and
// logs its failure itself (proto/switchyard/calls/v1). What a notice saves
// is the answer's message and the wake-ups on both sides that carry it. Only
// a call that returns at once and whose response is empty may be a notice:
// its reply is left as it is. A notice handed over is lost when the stream
// breaks before sending it, as a call whose answer never came is; where the
// call goes unary (no stream yet, a server without call streams), and on a
// stream that has not answered anything yet, it is made and waited for as
// usual.
func NoAnswer() grpc.CallOption { return noAnswer{} }

type noAnswer struct{ grpc.EmptyCallOption }

// Invoke makes a unary call over the stream.
func (c *CallConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	req, ok1 := args.(proto.Message)
	resp, ok2 := reply.(proto.Message)
	notice, ok3 := callOptions(opts)
	// A call over the stream has no headers of its own (its handler sees
	// the stream's): one with metadata of its own goes unary, or that
	// metadata would be lost.
	md, _ := metadata.FromOutgoingContext(ctx)
	if !ok1 || !ok2 || !ok3 || md.Len() > 0 || time.Now().UnixNano() < c.unaryUntil.Load() {
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	s := c.ready()
	if s == nil {
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return status.Errorf(codes.Internal, "encoding the %s request: %v", method, err)
	}
	if len(body) > maxWrapped {
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	if notice && s.accepted.Load() {
		err = s.notify(ctx, c.ids.Add(1), method, body)
	} else {
		err = s.call(ctx, c.ids.Add(1), method, body, resp)
	}
	switch {
	case errors.Is(err, errNoCallService):
		c.unaryUntil.Store(time.Now().Add(unaryFor).UnixNano())
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	case errors.Is(err, errNotSent):
		// The stream ended before the call went out: it is answered as a
		// unary call would be now (a new stream opens meanwhile).
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	return err
}

// NewStream opens a streaming call on the wrapped connection.
func (c *CallConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.cc.NewStream(ctx, desc, method, opts...)
}

// callOptions reports whether the options ask for a notice (NoAnswer), and
// whether the call may travel over the stream at all: its options are only
// those every generated client adds, and NoAnswer.
func callOptions(opts []grpc.CallOption) (notice, ok bool) {
	for _, o := range opts {
		switch o.(type) {
		case grpc.StaticMethodCallOption:
		case noAnswer:
			notice = true
		default:
			return false, false
		}
	}
	return notice, true
}

// ready is the open stream, or nil when there is none yet, after starting
// to open one: a stream waits for the connection to be ready, which no
// call's deadline should.
func (c *CallConn) ready() *clientCalls {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil || c.opening || time.Now().Before(c.nextOpen) {
		return c.cur
	}
	c.opening = true
	go c.open()
	return nil
}

// open opens a stream and serves it until it ends.
func (c *CallConn) open() {
	// The stream outlives every call on it: its context ends when it breaks
	// or the connection closes.
	ctx, cancel := context.WithCancel(context.Background())
	st, err := callsv1.NewCallServiceClient(c.cc).Calls(ctx)
	c.mu.Lock()
	c.opening = false
	if err != nil {
		c.nextOpen = time.Now().Add(reopenAfter)
		c.mu.Unlock()
		cancel()
		return
	}
	s := &clientCalls{
		stream: st, cancel: cancel,
		pending: map[uint64]chan *callsv1.CallsResponse{},
		queue:   make(chan *callsv1.CallsRequest, sendQueue),
		dead:    make(chan struct{}),
	}
	c.cur = s
	c.mu.Unlock()
	go s.send()
	s.receive()
	if errors.Is(s.err, errNoCallService) {
		c.unaryUntil.Store(time.Now().Add(unaryFor).UnixNano())
	}
	c.mu.Lock()
	if c.cur == s {
		c.cur = nil
	}
	c.nextOpen = time.Now().Add(reopenAfter)
	c.mu.Unlock()
}

var (
	// errNoCallService marks a stream the server refused: it has no
	// CallService.
	errNoCallService = errors.New("servicekit: the server has no call streams")
	// errNotSent: the stream had ended before the call was handed over.
	errNotSent = errors.New("servicekit: the call stream ended before the call was sent")
)

// clientCalls is one open stream and the calls waiting on it.
type clientCalls struct {
	stream callsv1.CallService_CallsClient
	cancel context.CancelFunc
	// queue hands requests to send, the stream's one sender: a caller waits
	// for the hand-over no longer than its deadline, however long the
	// stream's flow control holds a send up.
	queue chan *callsv1.CallsRequest

	// accepted: an answer has come over the stream, so the server serves
	// call streams. Until then a notice is sent as a call and waited for: a
	// server without CallService refuses the stream only after it was
	// opened, and a notice already handed over would be lost with it.
	accepted atomic.Bool

	mu      sync.Mutex
	pending map[uint64]chan *callsv1.CallsResponse
	err     error         // why the stream ended, once dead is closed
	dead    chan struct{} // closed when the stream has ended
}

// send sends what the callers hand over until the stream ends.
func (s *clientCalls) send() {
	for {
		select {
		case req := <-s.queue:
			if err := s.stream.Send(req); err != nil {
				s.cancel() // receive learns why, and ends the stream
				return
			}
		case <-s.dead:
			return
		}
	}
}

// receive hands each answer to its call until the stream ends, then fails
// the calls still waiting.
func (s *clientCalls) receive() {
	defer s.cancel()
	for {
		r, err := s.stream.Recv()
		if err != nil {
			s.mu.Lock()
			s.err = streamError(err)
			close(s.dead)
			s.mu.Unlock()
			return
		}
		s.accepted.Store(true)
		s.mu.Lock()
		ch, ok := s.pending[r.GetCallId()]
		delete(s.pending, r.GetCallId())
		s.mu.Unlock()
		if ok {
			ch <- r // buffered: the caller may have stopped waiting
		}
	}
}

// streamError is what a call waiting on an ended stream fails with.
func streamError(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		// The server ended the stream (it is draining) without answering:
		// the call did not run.
		return status.Error(codes.Unavailable, "servicekit: the server ended the call stream before answering (draining)")
	case status.Code(err) == codes.Unimplemented:
		return fmt.Errorf("%w: %v", errNoCallService, err)
	default:
		s := status.Convert(err)
		if s.Code() == codes.Canceled || s.Code() == codes.OK || s.Code() == codes.Unknown {
			return status.Errorf(codes.Unavailable, "servicekit: the call stream ended: %v", s.Message())
		}
		return s.Err()
	}
}

// request is a call's message: what is left of its deadline and its trace
// context travel with it.
func request(ctx context.Context, id uint64, method string, body []byte) (*callsv1.CallsRequest, error) {
	req := &callsv1.CallsRequest{CallId: id, Method: method, Request: body}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		if left <= 0 {
			return nil, status.FromContextError(context.DeadlineExceeded).Err()
		}
		req.Timeout = durationpb.New(left)
	}
	if trace.SpanContextFromContext(ctx).IsValid() || baggage.FromContext(ctx).Len() > 0 {
		tc := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(ctx, tc)
		req.TraceContext = tc
	}
	return req, nil
}

// notify hands a notice to the sender, within the caller's deadline.
func (s *clientCalls) notify(ctx context.Context, id uint64, method string, body []byte) error {
	req, err := request(ctx, id, method, body)
	if err != nil {
		return err
	}
	req.NoAnswer = true
	s.mu.Lock()
	err = s.err
	s.mu.Unlock()
	if err != nil {
		return notSent(err)
	}
	return s.handOver(ctx, req)
}

// handOver queues req for the sender, unless the stream ends or the
// caller's deadline passes first (then req was not sent).
func (s *clientCalls) handOver(ctx context.Context, req *callsv1.CallsRequest) error {
	select {
	case s.queue <- req:
		return nil
	case <-s.dead:
		return notSent(s.err)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// call sends one call and waits for its answer, its deadline or the end of
// the stream.
func (s *clientCalls) call(ctx context.Context, id uint64, method string, body []byte, reply proto.Message) error {
	req, err := request(ctx, id, method, body)
	if err != nil {
		return err
	}
	ch := make(chan *callsv1.CallsResponse, 1)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return notSent(s.err)
	}
	s.pending[id] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}

	if err := s.handOver(ctx, req); err != nil {
		forget() // never sent: nothing to cancel
		return err
	}
	select {
	case r := <-ch:
		return decodeAnswer(r, reply)
	case <-s.dead:
		select {
		case r := <-ch:
			return decodeAnswer(r, reply)
		default:
		}
		return s.err
	case <-ctx.Done():
		forget()
		// The server must hear of it, or a call without a deadline runs
		// there for ever. The caller does not wait: with the queue full
		// the cancellation waits its turn on a goroutine of its own, until
		// the sender takes it or the stream ends.
		cancel := &callsv1.CallsRequest{CallId: id, Cancel: true}
		select {
		case s.queue <- cancel:
		default:
			go func() {
				select {
				case s.queue <- cancel:
				case <-s.dead:
				}
			}()
		}
		return status.FromContextError(ctx.Err()).Err()
	}
}

// notSent is why a call that never went out on an ended stream fails: a
// server that refused the stream says so (unary from now on); otherwise
// the call is made unary.
func notSent(err error) error {
	if errors.Is(err, errNoCallService) {
		return err
	}
	return errNotSent
}

// decodeAnswer turns an answer into the call's response or error. An answer
// with neither a status nor a response is a response that encodes to no
// bytes (every field at its default), as proto3 gives no way to tell it
// from none.
func decodeAnswer(r *callsv1.CallsResponse, reply proto.Message) error {
	if st := r.GetStatus(); len(st) > 0 {
		var p spb.Status
		if err := proto.Unmarshal(st, &p); err != nil {
			return status.Errorf(codes.Internal, "servicekit: decoding a call's status: %v", err)
		}
		if codes.Code(p.GetCode()) == codes.OK {
			// A status travels only for a call that failed, without a
			// response: read as OK it would be an empty success.
			return status.Errorf(codes.Internal, "servicekit: a call's answer carries status OK (%q) and no response", p.GetMessage())
		}
		return status.ErrorProto(&p)
	}
	if err := proto.Unmarshal(r.GetResponse(), reply); err != nil {
		return status.Errorf(codes.Internal, "servicekit: decoding a call's response: %v", err)
	}
	return nil
}
