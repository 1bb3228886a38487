package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/chat"
)

// apiError is a failure to report to a client, independent of the API's error
// shape. Kind is the error class in OpenAI's words; each API maps it.
type apiError struct {
	Status  int
	Kind    string // invalid_request_error, authentication_error, not_found_error, rate_limit_error, server_error, overloaded_error, request_too_large
	Message string
	Param   string
	Code    string
	// RetryAfter, when set, is sent as Retry-After: the scheduler said when
	// a shed request may come back.
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return e.Message }

func badRequestf(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Kind: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

// grpcCodes maps the status codes of the scheduler and shims to client
// answers: the one table of the service boundary. A shim's InvalidArgument
// and OutOfRange are the client's (the engine judged its prompt and
// parameters: a prompt longer than the worker's cache, vLLM's 400s); the
// same from the scheduler is the frontend's own malformed call
// (errMalformedCall), a 500.
var grpcCodes = map[codes.Code]struct {
	status int
	kind   string
}{
	codes.InvalidArgument:    {http.StatusBadRequest, "invalid_request_error"},
	codes.OutOfRange:         {http.StatusBadRequest, "invalid_request_error"},
	codes.NotFound:           {http.StatusServiceUnavailable, "overloaded_error"}, // no such worker (any more)
	codes.FailedPrecondition: {http.StatusServiceUnavailable, "overloaded_error"}, // the worker's engine does not serve the model or route (its HTTP 404)
	codes.Unavailable:        {http.StatusServiceUnavailable, "overloaded_error"},
	codes.ResourceExhausted:  {http.StatusTooManyRequests, "rate_limit_error"},
	codes.DeadlineExceeded:   {http.StatusGatewayTimeout, "server_error"},
	codes.Unauthenticated:    {http.StatusUnauthorized, "authentication_error"},
	codes.PermissionDenied:   {http.StatusForbidden, "permission_error"},
}

// errMalformedCall marks a backend's refusal of a call the frontend built
// alone, from a request it had already validated (the scheduler's Route): the
// frontend's bug, never the client's, so a 500 and not a 400.
var errMalformedCall = errors.New("malformed backend call")

// toAPIError classifies any error of the request path.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, errMalformedCall) {
		return &apiError{Status: http.StatusInternalServerError, Kind: "server_error", Message: "internal error"}
	}
	var re *chat.RequestError
	if errors.As(err, &re) {
		return &apiError{Status: http.StatusBadRequest, Kind: "invalid_request_error", Param: re.Param, Message: re.Message}
	}
	var ie *agentctx.Error
	if errors.As(err, &ie) {
		return &apiError{Status: http.StatusBadRequest, Kind: "invalid_request_error", Param: ie.Header, Code: "invalid_session_id", Message: ie.Error()}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Kind: "request_too_large",
			Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
	}
	if errors.Is(err, context.Canceled) {
		return &apiError{Status: 499, Kind: "server_error", Message: "request cancelled"}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &apiError{Status: http.StatusGatewayTimeout, Kind: "server_error", Message: "timed out"}
	}
	// The status itself, not status.FromError's: that one's message is the
	// whole chain ("route: rpc error: code = ... desc = ..."), which a client
	// should not read.
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) {
		st := gs.GRPCStatus()
		if m, ok := grpcCodes[st.Code()]; ok {
			ae := &apiError{Status: m.status, Kind: m.kind, Message: upstreamMessage(st)}
			if st.Code() == codes.ResourceExhausted {
				ae.RetryAfter = retryDelay(st)
			}
			return ae
		}
		if st.Code() == codes.Canceled {
			return &apiError{Status: 499, Kind: "server_error", Message: "request cancelled"}
		}
		return &apiError{Status: http.StatusBadGateway, Kind: "server_error", Message: "upstream error: " + upstreamMessage(st)}
	}
	return &apiError{Status: http.StatusInternalServerError, Kind: "server_error", Message: "internal error"}
}

// upstreamMessage is what a client (or a tenant's console) reads of a
// backend's status: its message, unless that is an account of a failed
// connection, gRPC's ("connection error: desc = ... dial tcp 10.0.0.7:9100:
// connect: connection refused") or an engine shim's of its engine's HTTP
// server ("engine unreachable: Post \"http://10.0.0.7:8000/...\": EOF"),
// which names the mesh's internal addresses and says nothing a client can
// act on. The log keeps the whole error (the handler logs the error
// itself, not the answer).
func upstreamMessage(st *status.Status) string {
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable, codes.Unknown, codes.Internal, codes.DeadlineExceeded, codes.Aborted, codes.DataLoss:
	default:
		return msg // a refusal's own words (an engine's 400 may cite a URL)
	}
	for _, transport := range []string{"connection error", "transport: ", "name resolver", "dial tcp", "read tcp", "write tcp", "://"} {
		if strings.Contains(msg, transport) {
			return "the connection to a service of the mesh failed"
		}
	}
	return msg
}

// retryDelay is the delay of st's RetryInfo detail, 0 without one. The
// scheduler attaches it when it sheds load; a present but shorter delay is
// raised to 1 s, the least Retry-After can say, so that a RetryInfo always
// becomes a header.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return max(ri.GetRetryDelay().AsDuration(), time.Second)
		}
	}
	return 0
}

// kindFor is the error type e's client reads in api's shape: OpenAI's
// fewer types, or Anthropic's.
func (e *apiError) kindFor(api string) string {
	kind := e.Kind
	if api == apiMessages {
		switch {
		case kind == "server_error" && e.Status == http.StatusGatewayTimeout:
			kind = "timeout_error"
		case kind == "server_error":
			kind = "api_error"
		}
		return kind
	}
	switch kind {
	case "not_found_error", "request_too_large":
		kind = "invalid_request_error"
	case "overloaded_error":
		kind = "server_error"
	}
	return kind
}

// openAIErrorBody is OpenAI's error JSON: {"error":{"message","type","param","code"}}.
func openAIErrorBody(e *apiError) []byte {
	kind := e.kindFor(apiChat)
	body := struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}{}
	body.Error.Message, body.Error.Type = e.Message, kind
	if e.Param != "" {
		body.Error.Param = &e.Param
	}
	if e.Code != "" {
		body.Error.Code = &e.Code
	}
	b, _ := json.Marshal(body)
	return b
}

// anthropicErrorBody is Anthropic's: {"type":"error","error":{"type","message"}}.
func anthropicErrorBody(e *apiError) []byte {
	kind := e.kindFor(apiMessages)
	// Anthropic names the offending field in the message ("messages: ..."),
	// unless the message already does.
	msg := e.Message
	if e.Param != "" && !strings.Contains(msg, e.Param) {
		msg = e.Param + ": " + msg
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}})
	return b
}

// writeError answers with an error in the API's shape, unless the client is
// gone (499: nobody to tell).
func writeError(w http.ResponseWriter, api string, e *apiError) {
	if e.Status == 499 {
		return
	}
	var body []byte
	if api == apiMessages {
		body = anthropicErrorBody(e)
	} else {
		body = openAIErrorBody(e)
	}
	w.Header().Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		// Retry-After is whole seconds; round up so clients never come back early.
		secs := (e.RetryAfter + time.Second - 1) / time.Second
		w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	}
	w.WriteHeader(e.Status)
	w.Write(body)
}
