package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// bodyBuf holds a request body's bytes, and is read into again for a later
// request once nothing refers to them. An agent turn's body is about half a
// megabyte; read into fresh memory every turn, it was the largest item of
// a warm 100k-token turn's frontend CPU (the runtime clearing the new
// buffer), and that much garbage a turn.
//
// Who refers to a body's bytes: the request it was read for, until its
// handler returns (a decoded request may keep a slice of them,
// chat.ResponsesRequest.Input, though nothing reads it after decoding: the
// handler's hold is a margin), and, while the session table keeps the
// body's chat.PrevBody for the session's next request, the table and every
// request comparing its own body with it (reuseBody). Each of them holds
// the buffer and releases it when done; the last release pools it. A hold
// that is never released (an entry the table evicted, a request read
// outside a handler) leaves the buffer to the collector: the mistake this
// design cannot afford is the other one, a release while someone still
// reads.
//
// Buffers are pooled by size class, and a body is read into one of the
// class its announced length needs, so that what the session table keeps
// for a small body is not a large buffer a big one left (at most four
// times the body). Bodies under half the smallest class are not pooled:
// their memory is cheap to clear, and the table may keep one per session.
// Nor are those over the largest class, preallocMax: a client that
// announces more than that gets no more memory before its bytes come than
// it did before pooling.
type bodyBuf struct {
	b    []byte
	refs atomic.Int32
}

const (
	minPooledBody = 64 << 10 // the smallest class
	bodyClasses   = 5        // 64 KiB, 128 KiB, ... 1 MiB (preallocMax)
)

// bodyPools[k] holds buffers of at least minPooledBody<<k bytes (and less
// than twice that).
var bodyPools [bodyClasses]sync.Pool

// bodyClass is the smallest class whose buffers hold n bytes; -1 when n is
// under half the smallest or over the largest.
func bodyClass(n int) int {
	if n < minPooledBody/2 {
		return -1
	}
	for k := range bodyClasses {
		if minPooledBody<<k >= n {
			return k
		}
	}
	return -1
}

// newBodyBuf is an empty buffer for a body of about size bytes (0:
// unknown), held once, by the caller.
func newBodyBuf(size int) *bodyBuf {
	var b *bodyBuf
	if k := bodyClass(size); k >= 0 {
		if v, ok := bodyPools[k].Get().(*bodyBuf); ok {
			b = v
		} else {
			b = &bodyBuf{b: make([]byte, 0, minPooledBody<<k)}
		}
	} else {
		b = &bodyBuf{}
	}
	b.b = b.b[:0]
	b.refs.Store(1)
	return b
}

func (b *bodyBuf) hold() { b.refs.Add(1) }

// release lets go of one hold; the last one pools the buffer in the
// largest class its capacity fills.
func (b *bodyBuf) release() {
	if b.refs.Add(-1) != 0 || cap(b.b) < minPooledBody {
		return
	}
	for k := bodyClasses - 1; k >= 0; k-- {
		if c := minPooledBody << k; cap(b.b) >= c {
			if cap(b.b) < 2*c {
				bodyPools[k].Put(b)
			}
			return // larger than the largest class: the collector's
		}
	}
}

// readBody reads the (size-limited) request body into buf; decoding it
// rejects a body that is not UTF-8 (chat's decoders).
func readBody(r *http.Request, limit int64, buf *bodyBuf) ([]byte, error) {
	// A compressed body would fail decoding as "not valid UTF-8": say what
	// is wrong instead.
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, &apiError{Status: http.StatusUnsupportedMediaType, Kind: "invalid_request_error",
			Message: fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", ce)}
	}
	// Room for the announced size first (an agent turn's body is often
	// half a megabyte: growing as bytes come would copy it about twice
	// over); the body is still read to its end, so a wrong Content-Length
	// costs only a grow.
	w := bytes.NewBuffer(buf.b[:0])
	// At most preallocMax up front: a client that announces 32 MiB and
	// sends nothing must not pin it; past that the buffer grows as bytes come.
	if n := r.ContentLength; n > 0 && n <= limit {
		w.Grow(int(min(n, preallocMax)) + bytes.MinRead) // ReadFrom wants MinRead free to see EOF without growing
	}
	_, err := w.ReadFrom(r.Body)
	buf.b = w.Bytes()
	if err != nil {
		return nil, bodyError(r.Context(), err)
	}
	return buf.b, nil
}

// bodyError is why a body could not be read, none of it the server's
// failure: over the limit (the MaxBytesError, a 413), too slow
// (servicekit.LimitBodyTime's deadline, a 408), cut short by the client's
// going away (a 499, as a client that leaves before its answer is), or
// badly framed (a 400). net/http cancels the request's context when a read of the
// connection fails, so a cancelled ctx tells a connection that ended or was
// reset mid-body (its read failed: io.ErrUnexpectedEOF, ECONNRESET) from a
// body whose bytes came but were not HTTP (bad chunking), which is the
// client's error. The deadline cancels ctx too, hence its case first. A
// client that only closed its sending side mid-body reads as one that left
// (the same EOF), and is treated as one.
func bodyError(ctx context.Context, err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{Status: http.StatusRequestTimeout, Kind: "invalid_request_error",
			Message: "the request body did not arrive in time"}
	case ctx.Err() != nil:
		return &apiError{Status: 499, Message: "the client went away before its body arrived"}
	}
	return badRequestf("", "the request body could not be read: %v", err)
}

// preallocMax bounds readBody's buffer before any byte arrived: an agent
// turn of 100k tokens is about half of it.
const preallocMax = 1 << 20

// requestBodies are the body buffers a request's handler holds, released
// when it returns (handler).
type requestBodies struct{ held []*bodyBuf }

type requestBodiesKey struct{}

// withRequestBodies gives r's handler a place to hold body buffers in;
// done releases them.
func withRequestBodies(r *http.Request) (_ *http.Request, done func()) {
	rb := &requestBodies{}
	return r.WithContext(context.WithValue(r.Context(), requestBodiesKey{}, rb)), func() {
		for _, b := range rb.held {
			b.release()
		}
	}
}

// requestBody is a buffer for r's body, held by r's handler (never
// released, so never reused, when r has no handler's place: withRequestBodies).
func requestBody(r *http.Request, limit int64) *bodyBuf {
	size := 0
	if n := r.ContentLength; n > 0 && n <= limit {
		size = int(n) + bytes.MinRead // readBody's room
	}
	b := newBodyBuf(size)
	if rb, ok := r.Context().Value(requestBodiesKey{}).(*requestBodies); ok {
		rb.held = append(rb.held, b)
	}
	return b
}
