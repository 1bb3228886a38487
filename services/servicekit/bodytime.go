package servicekit

import (
	"io"
	"net/http"
	"time"
)

// LimitBodyTime gives r's body d to arrive, from now: a client that stops
// sending mid-body would otherwise hold its connection, and whatever the
// server bounds (the frontend's in-flight requests), as long as it likes.
// The deadline is lifted when the body has been read to its end, so that none of the
// answer's time counts against it (net/http clears an HTTP/1 connection's
// deadline there itself; an HTTP/2 stream's is the stream's own). A body
// that failed keeps it, so that net/http's attempt to read what is left of
// it before answering fails too, rather than waiting for bytes that are not
// coming. A request that announces no body (Content-Length 0: every GET,
// whose HTTP/2 form still carries a body reader), or a d of 0 or less, is
// left as it is.
func LimitBodyTime(w http.ResponseWriter, r *http.Request, d time.Duration) io.ReadCloser {
	body := r.Body
	if d <= 0 || body == nil || body == http.NoBody || r.ContentLength == 0 {
		return body
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return body // a writer without deadlines (a test's recorder)
	}
	return &timedBody{ReadCloser: body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

// timedBody lifts its read deadline once the body is read to its end.
type timedBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}
