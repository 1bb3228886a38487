package frontend

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// shedStatus is what the scheduler's Route answers when it sheds a request;
// retry 0 leaves out the RetryInfo detail.
func shedStatus(t *testing.T, code codes.Code, retry time.Duration) error {
	t.Helper()
	st := status.New(code, "fleet over capacity: new session shed")
	if retry == 0 {
		return st.Err()
	}
	st, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// TestShedIsRateLimitErrorInEveryAPI: a request the scheduler sheds is a 429
// in the API's own error shape, with Retry-After when the scheduler said
// when to come back, and is counted as shed.
func TestShedIsRateLimitErrorInEveryAPI(t *testing.T) {
	m := newMesh(t, nil)
	apis := []struct {
		api, path, body string
		topType         string // Anthropic's {"type":"error","error":{...}}; OpenAI's {"error":{...}} has none
	}{
		{api: apiChat, path: "/v1/chat/completions", body: turn1},
		{api: apiResponses, path: "/v1/responses", body: `{"model":"m","input":"hi"}`},
		{api: apiMessages, path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, topType: "error"},
	}
	retries := []struct {
		name       string
		retry      time.Duration
		retryAfter string
	}{
		{name: "retry info", retry: 2500 * time.Millisecond, retryAfter: "3"},
		{name: "no retry info", retryAfter: ""},
	}
	for _, a := range apis {
		for _, r := range retries {
			t.Run(a.api+"/"+r.name, func(t *testing.T) {
				m.sched.mu.Lock()
				m.sched.routeErr = shedStatus(t, codes.ResourceExhausted, r.retry)
				m.sched.mu.Unlock()
				shed := m.svc.metrics.shed.WithLabelValues(a.api)
				before := testutil.ToFloat64(shed)

				resp := post(t, m.url+a.path, a.body)
				body := readAll(t, resp.Body)
				if resp.StatusCode != 429 {
					t.Fatalf("status %d, want 429: %s", resp.StatusCode, body)
				}
				if got := resp.Header.Get("Retry-After"); got != r.retryAfter {
					t.Errorf("Retry-After %q, want %q", got, r.retryAfter)
				}
				var e struct {
					Type  string `json:"type"`
					Error struct {
						Type, Message string
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(body), &e); err != nil {
					t.Fatalf("%v: %s", err, body)
				}
				if e.Type != a.topType {
					t.Errorf("not the API's error shape: %s", body)
				}
				// The scheduler's message as it gave it: not wrapped in how
				// the frontend got it ("route: rpc error: code = ...").
				if e.Error.Type != "rate_limit_error" || e.Error.Message != "fleet over capacity: new session shed" {
					t.Errorf("error %+v, want rate_limit_error with the scheduler's message alone", e.Error)
				}
				if got := testutil.ToFloat64(shed) - before; got != 1 {
					t.Errorf("shed counter +%v, want +1", got)
				}
			})
		}
	}
}

// TestRetryAfterHeader: Retry-After is whole seconds rounded up, at least 1,
// and only a shed (ResourceExhausted) carries it.
func TestRetryAfterHeader(t *testing.T) {
	tests := []struct {
		name  string
		code  codes.Code
		retry time.Duration
		want  string
	}{
		{name: "fraction rounds up", code: codes.ResourceExhausted, retry: 2500 * time.Millisecond, want: "3"},
		{name: "whole seconds", code: codes.ResourceExhausted, retry: 2 * time.Second, want: "2"},
		{name: "under a second is 1", code: codes.ResourceExhausted, retry: time.Millisecond, want: "1"},
		{name: "negative is 1", code: codes.ResourceExhausted, retry: -time.Second, want: "1"},
		{name: "no retry info", code: codes.ResourceExhausted, want: ""},
		{name: "not a shed", code: codes.Unavailable, retry: 2 * time.Second, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeError(w, apiChat, toAPIError(shedStatus(t, tt.code, tt.retry)))
			if got := w.Header().Get("Retry-After"); got != tt.want {
				t.Errorf("Retry-After %q, want %q", got, tt.want)
			}
		})
	}
}
