package servicekit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The REST gateways serve operators' and tools' calls; the mesh's own
// traffic is gRPC. A REST request's body is read whole before the gateway
// decodes it, so it is bounded, and it must arrive in time: a client that
// announces a large body and trickles it would otherwise hold a connection
// and its memory as long as it liked.
// MaxRESTBody is the largest REST request body: many times what the
// largest real call takes (a 100k-token prompt's block hashes are about
// 150 KB of JSON).
const MaxRESTBody = 16 << 20

// restBodyTimeout is how long a REST body has to arrive (a variable for
// the tests).
var restBodyTimeout = 30 * time.Second

// guardREST serves the gateway's requests once they may be decoded: under
// mutual TLS a caller without a mesh identity is refused before its body is
// read (the authorizer would refuse it after decoding, having held the
// whole body), and a body is read whole, within MaxRESTBody and
// restBodyTimeout. Refusals are the gateway's own error JSON.
func (s *Server) guardREST(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.authz != nil {
			if _, ok := s.restIdentity(r); !ok {
				s.authz.log.WarnContext(r.Context(), "call refused: no mesh identity", "path", r.URL.Path)
				s.restError(w, r, 0, errUnidentified)
				return
			}
		}
		if !utf8Request(r) {
			// The gateway would fail to marshal the call it makes of it,
			// as an Internal error, before any handler or log saw it.
			s.restError(w, r, 0, status.Error(codes.InvalidArgument, "the request's path or query is not UTF-8"))
			return
		}
		if r.ContentLength > MaxRESTBody {
			// Refused before a byte is read: a client that asked to
			// continue (Expect: 100-continue) is not told to send it.
			s.restError(w, r, http.StatusRequestEntityTooLarge, tooLarge(r.ContentLength))
			return
		}
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			body, code, err := readRESTBody(w, r)
			if err != nil {
				s.restError(w, r, code, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

// utf8Request reports whether r's path and query, decoded, are UTF-8: the
// string fields of the calls the gateway makes of them must be.
func utf8Request(r *http.Request) bool {
	if !utf8.ValidString(r.URL.Path) {
		return false
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return true // the gateway answers a query it cannot parse itself
	}
	for k, vs := range q {
		if !utf8.ValidString(k) || slices.ContainsFunc(vs, func(v string) bool { return !utf8.ValidString(v) }) {
			return false
		}
	}
	return true
}

func tooLarge(n int64) error {
	return status.Errorf(codes.InvalidArgument, "request body of %d bytes; a REST call's is at most %d (large calls are gRPC's)", n, MaxRESTBody)
}

// readRESTBody reads r's body whole, or says why not with the HTTP status
// to answer.
func readRESTBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, LimitBodyTime(w, r, restBodyTimeout), MaxRESTBody))
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return body, 0, nil
	case errors.As(err, &mbe):
		return nil, http.StatusRequestEntityTooLarge, tooLarge(mbe.Limit + 1)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, http.StatusRequestTimeout, status.Errorf(codes.InvalidArgument, "the request body did not arrive within %v", restBodyTimeout)
	}
	return nil, http.StatusBadRequest, status.Errorf(codes.InvalidArgument, "the request body could not be read: %v", err)
}

// restError answers a REST request with err in the gateway's error JSON,
// at httpStatus when it is not 0 (else the status err's code maps to).
func (s *Server) restError(w http.ResponseWriter, r *http.Request, httpStatus int, err error) {
	if httpStatus != 0 {
		err = &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: err}
	}
	_, out := runtime.MarshalerForRequest(s.gateway, r)
	runtime.HTTPError(context.WithoutCancel(r.Context()), s.gateway, out, w, r, err)
}
