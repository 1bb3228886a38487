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
	"go.opentelemetry.io/otel/propagation"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
// cancellation carried to the server. When the stream breaks, the calls
// waiting on it fail UNAVAILABLE, as unary calls on a broken connection do,
// and the next call opens a new stream. A server without CallService (an
// older build) gets unary calls, from the first refusal on. Calls with call
// options (other than the generated clients' own) and requests too large to
// wrap go unary too. Closing the wrapped connection ends the stream.
type CallConn struct {
	cc        *grpc.ClientConn
	unaryOnly atomic.Bool // the server answered the stream UNIMPLEMENTED
	ids       atomic.Uint64

	mu  sync.Mutex
	cur *clientCalls // the open stream; nil before the first call and after a break
}

// NewCallConn wraps cc.
func NewCallConn(cc *grpc.ClientConn) *CallConn { return &CallConn{cc: cc} }

// maxWrapped is the largest request sent over the stream: its envelope must
// stay under the transport's message bound (maxMsgSize).
const maxWrapped = maxMsgSize - 1<<16

// Invoke makes a unary call over the stream.
func (c *CallConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	req, ok1 := args.(proto.Message)
	resp, ok2 := reply.(proto.Message)
	if c.unaryOnly.Load() || !ok1 || !ok2 || !generatedOnly(opts) {
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return status.Errorf(codes.Internal, "encoding the %s request: %v", method, err)
	}
	if len(body) > maxWrapped {
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	s, err := c.stream()
	if err != nil {
		return err
	}
	err = s.call(ctx, c.ids.Add(1), method, body, resp)
	if errors.Is(err, errNoCallService) {
		c.unaryOnly.Store(true)
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	return err
}

// NewStream opens a streaming call on the wrapped connection.
func (c *CallConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.cc.NewStream(ctx, desc, method, opts...)
}

// generatedOnly: the options are those every generated client adds.
func generatedOnly(opts []grpc.CallOption) bool {
	for _, o := range opts {
		if _, ok := o.(grpc.StaticMethodCallOption); !ok {
			return false
		}
	}
	return true
}

// stream is the open stream, opened when there is none.
func (c *CallConn) stream() (*clientCalls, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		return c.cur, nil
	}
	// The stream outlives every call on it: its context ends when it breaks
	// or the connection closes.
	ctx, cancel := context.WithCancel(context.Background())
	st, err := callsv1.NewCallServiceClient(c.cc).Calls(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &clientCalls{stream: st, cancel: cancel, pending: map[uint64]chan *callsv1.CallsResponse{}, dead: make(chan struct{})}
	c.cur = s
	go func() {
		s.receive()
		c.mu.Lock()
		if c.cur == s {
			c.cur = nil
		}
		c.mu.Unlock()
	}()
	return s, nil
}

// errNoCallService marks a stream the server refused: it has no CallService.
var errNoCallService = errors.New("servicekit: the server has no call streams")

// clientCalls is one open stream and the calls waiting on it.
type clientCalls struct {
	stream callsv1.CallService_CallsClient
	cancel context.CancelFunc
	sendMu sync.Mutex // a stream takes one SendMsg at a time

	mu      sync.Mutex
	pending map[uint64]chan *callsv1.CallsResponse
	err     error         // why the stream ended, once dead is closed
	dead    chan struct{} // closed when the stream has ended
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

// call sends one call and waits for its answer, its deadline or the end of
// the stream.
func (s *clientCalls) call(ctx context.Context, id uint64, method string, body []byte, reply proto.Message) error {
	req := &callsv1.CallsRequest{CallId: id, Method: method, Request: body}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		if left <= 0 {
			return status.FromContextError(context.DeadlineExceeded).Err()
		}
		req.Timeout = durationpb.New(left)
	}
	tc := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, tc)
	if len(tc) > 0 {
		req.TraceContext = tc
	}
	ch := make(chan *callsv1.CallsResponse, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.pending[id] = ch
	s.mu.Unlock()

	s.sendMu.Lock()
	err := s.stream.Send(req)
	s.sendMu.Unlock()
	if err != nil {
		// The stream is broken; receive learns why and fails this call.
		<-s.dead
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
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
		s.sendMu.Lock()
		_ = s.stream.Send(&callsv1.CallsRequest{CallId: id, Cancel: true}) // best effort
		s.sendMu.Unlock()
		return status.FromContextError(ctx.Err()).Err()
	}
}

// decodeAnswer turns an answer into the call's response or error.
func decodeAnswer(r *callsv1.CallsResponse, reply proto.Message) error {
	if st := r.GetStatus(); len(st) > 0 {
		var p spb.Status
		if err := proto.Unmarshal(st, &p); err != nil {
			return status.Errorf(codes.Internal, "servicekit: decoding a call's status: %v", err)
		}
		return status.ErrorProto(&p)
	}
	if err := proto.Unmarshal(r.GetResponse(), reply); err != nil {
		return status.Errorf(codes.Internal, "servicekit: decoding a call's response: %v", err)
	}
	return nil
}
