package adapter

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
)

// cannedEngine answers every generation with the same SSE body, as an
// engine would stream it.
func cannedEngine(t *testing.T, e Engine, chunks ...string) *Backend {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
	}))
	t.Cleanup(srv.Close)
	b, err := New(Config{Engine: e, WorkerID: "w", URL: srv.URL, EventsEndpoint: ""}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What the engine says went wrong inside a stream reaches the caller with
// the code that says whose fault it is (the frontend moves a turn to
// another worker only on UNAVAILABLE and the like), and its message.
func TestGenerateStreamErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		engine Engine
		chunks []string
		code   codes.Code
		msg    string
	}{
		{"vLLM error object", VLLM, []string{
			`{"error":{"message":"engine died","type":"InternalServerError","code":500}}`, "[DONE]",
		}, codes.Unavailable, "engine died"},
		{"older vLLM flat ErrorResponse", VLLM, []string{
			`{"object":"error","message":"boom in the stream","type":"BadRequestError","param":null,"code":400}`, "[DONE]",
		}, codes.Unavailable, "boom in the stream"},
		{"vLLM without return_token_ids", VLLM, []string{
			`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"Hello","finish_reason":null}]}`,
			`{"id":"c","object":"text_completion","choices":[{"index":0,"text":" world","finish_reason":"length"}]}`,
			`{"id":"c","object":"text_completion","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}`, "[DONE]",
		}, codes.FailedPrecondition, "return_token_ids"},
		{"vLLM aborts the request itself", VLLM, []string{
			`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"a","token_ids":[7],"finish_reason":null}]}`,
			`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"","token_ids":[],"finish_reason":"abort"}]}`, "[DONE]",
		}, codes.Aborted, "aborted"},
		{"vLLM ends the request with an error", VLLM, []string{
			`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"a","token_ids":[7],"finish_reason":"error"}]}`, "[DONE]",
		}, codes.Internal, "error"},
		{"SGLang refuses the request", SGLang, []string{
			`{"error":{"message":"The input (9000 tokens) is longer than the model's context length (8192 tokens)."}}`, "[DONE]",
		}, codes.InvalidArgument, "context length"},
		{"SGLang scheduler abort with a status", SGLang, []string{
			`{"output_ids":[],"meta_info":{"completion_tokens":0,"finish_reason":{"type":"abort","message":"Input length exceeds the token budget","status_code":400,"err_type":"BadRequestError"}}}`, "[DONE]",
		}, codes.InvalidArgument, "token budget"},
		{"SGLang server overloaded", SGLang, []string{
			`{"output_ids":[],"meta_info":{"completion_tokens":0,"finish_reason":{"type":"abort","message":"server is overloaded","status_code":503}}}`, "[DONE]",
		}, codes.Unavailable, "overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := cannedEngine(t, tc.engine, tc.chunks...)
			var got []uint32
			_, err := b.Generate(context.Background(), &enginev1.GenerateRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}},
				func(toks []uint32) error { got = append(got, toks...); return nil })
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err %v, want %v with %q (tokens %v)", err, tc.code, tc.msg, got)
			}
		})
	}
}

// An abort this shim did not ask for (no status: the engine's own, or
// another of its clients') cuts the answer short: an ABORTED error, which
// the frontend moves to another worker, not a result that would pass the
// cut answer to the client as complete.
func TestGenerateSGLangPlainAbort(t *testing.T) {
	b := cannedEngine(t, SGLang,
		`{"output_ids":[7],"meta_info":{"completion_tokens":1,"prompt_tokens":4}}`,
		`{"output_ids":[7],"meta_info":{"completion_tokens":1,"finish_reason":{"type":"abort","message":"Abort requested","status_code":null}}}`,
		"[DONE]")
	res, err := b.Generate(context.Background(), &enginev1.GenerateRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}},
		func([]uint32) error { return nil })
	if status.Code(err) != codes.Aborted {
		t.Fatalf("result %v, err %v; want ABORTED", res, err)
	}
}

// Retain hints for sessions that end without a release and never send
// another request must not stay in the shim's memory forever.
func TestHintBookForgetsExpiredSessions(t *testing.T) {
	b, err := New(Config{Engine: SGLang, WorkerID: "w", URL: "http://x"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	retain := func(session string, ttl uint32, at time.Time) {
		out := b.ApplyHints([]*kvv1.KvHintAction{{ActionId: "a", Payload: &kvv1.KvHintAction_Retain{
			Retain: &kvv1.RetainHint{SessionId: session, Priority: 50, TtlSeconds: ttl}}}}, at)
		if out[0].GetResult() != kvv1.HintResult_HINT_RESULT_DEFERRED {
			t.Fatalf("retain: %v", out[0])
		}
	}
	retain("forever", 0, now) // no ttl: kept until released
	// Rounds of sessions, each round's expired by the next: the book holds
	// at most two rounds' worth (it is swept once it has doubled).
	const round = 4 * minSweep
	for r := range 10 {
		at := now.Add(time.Duration(r) * time.Hour)
		for i := range round {
			retain(fmt.Sprintf("r%d-s%d", r, i), 60, at)
		}
	}
	b.hints.mu.Lock()
	n := len(b.hints.sessions)
	_, kept := b.hints.sessions["forever"]
	b.hints.mu.Unlock()
	if n > 2*round+1 || !kept {
		t.Fatalf("%d sessions in the book (at most %d live), the unexpiring one kept: %v", n, round+1, kept)
	}
}

// What an engine's error body says, from each shape vLLM and SGLang send.
func TestErrorMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}}`: "maximum context length is 4096 tokens",
		`{"object":"error","message":"The model x does not exist.","type":"NotFoundError","param":null,"code":404}`:      "The model x does not exist.",
		`{"error":"rate limited"}`:                       "rate limited",
		`{"detail":"Not Found"}`:                         "Not Found",
		`{"detail":[{"loc":["body"],"msg":"bad"}]}`:      `{"detail":[{"loc":["body"],"msg":"bad"}]}`,
		"Internal Server Error\n":                        "Internal Server Error",
		`{"error":{"message":""},"message":"the outer"}`: "the outer",
	} {
		if got := errorMessage([]byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}
