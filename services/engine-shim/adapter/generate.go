package adapter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/agentctx"
)

// Emit receives each chunk of generated tokens; an error aborts the request.
type Emit func(tokens []uint32) error

// Generate runs one request on the engine, streaming token ids to emit, and
// returns the final result. Cancelling ctx closes the HTTP stream, which
// both engines treat as an abort. Errors are gRPC status errors.
func (b *Backend) Generate(ctx context.Context, req *enginev1.GenerateRequest, emit Emit) (*enginev1.GenerateResult, error) {
	if req.GetRequestId() == "" || len(req.GetTokenIds()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "request_id and token_ids are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	session := agentctx.Scope(req.GetAgent().GetTenant(), req.GetAgent().GetSessionId())
	ret, hasRet := b.retentionOf(req, session, time.Now())
	var path string
	var body any
	switch b.cfg.Engine {
	case SGLang:
		path, body = "/generate", b.sglangBody(req, ret, hasRet)
	default:
		path, body = "/v1/completions", b.vllmBody(req, ret, hasRet)
	}
	buf, err := json.Marshal(body)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.URL+path, bytes.NewReader(buf))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set("X-Request-Id", req.GetRequestId())
	if session != "" {
		// vLLM's session RFC (#48501) names the session in a header;
		// engines that do not know it ignore it.
		hreq.Header.Set("X-Session-ID", session)
	}
	start := time.Now()
	resp, err := b.cfg.HTTPClient.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "engine unreachable: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, httpStatus(resp.StatusCode, errorMessage(msg))
	}
	g := genState{start: start, prompt: len(req.GetTokenIds())}
	err = readSSE(resp.Body, func(data []byte) error {
		var toks []uint32
		var err error
		if b.cfg.Engine == SGLang {
			toks, err = g.sglangChunk(data)
		} else {
			toks, err = g.vllmChunk(data)
		}
		if err != nil {
			return err
		}
		if len(toks) > 0 {
			now := time.Now()
			if g.n == 0 {
				g.first = now
			}
			g.n += len(toks)
			g.last = now
			if err := emit(toks); err != nil {
				cancel() // the caller went away: close the stream, the engine aborts
				return errAborted{err}
			}
		}
		return nil
	})
	var ab errAborted
	switch {
	case errors.As(err, &ab):
		return nil, ab.err
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		if st, ok := status.FromError(err); ok {
			return nil, st.Err() // the engine said what went wrong, and whose fault it is
		}
		return nil, status.Errorf(codes.Unavailable, "engine stream: %v", err)
	case g.finish == enginev1.FinishReason_FINISH_REASON_UNSPECIFIED:
		return nil, status.Error(codes.Unavailable, "engine stream ended without a finish reason")
	case g.finish == enginev1.FinishReason_FINISH_REASON_ABORT:
		// Not this shim's abort (its caller is still here): the engine's
		// own, or another of its clients'. The answer is cut short, and a
		// result would pass it to the client as complete; an error lets
		// the frontend continue it on another worker.
		return nil, status.Error(codes.Aborted, "the engine aborted the request")
	}
	return g.result(b.cfg.WorkerID), nil
}

type errAborted struct{ err error }

func (e errAborted) Error() string { return e.err.Error() }

// httpStatus is the one mapping from engine HTTP statuses to gRPC codes.
func httpStatus(code int, msg string) error {
	c := codes.Internal
	switch {
	case code == http.StatusBadRequest, code == http.StatusUnprocessableEntity:
		c = codes.InvalidArgument
	case code == http.StatusNotFound:
		c = codes.FailedPrecondition // model or route not served
	case code == http.StatusTooManyRequests:
		c = codes.ResourceExhausted
	case code == http.StatusServiceUnavailable, code >= 500:
		c = codes.Unavailable
	}
	return status.Errorf(c, "engine HTTP %d: %s", code, msg)
}

// errorMessage is what an engine's error body says: the message of vLLM's
// and SGLang's error JSON ({"error":{"message"}}, vLLM's older
// {"object":"error","message"}, FastAPI's {"detail"}), else the body as it
// came. The client reads it inside its own API's error JSON, which a
// pasted JSON body would only obscure.
func errorMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var text string
		switch {
		case json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(e.Error, &text) == nil && text != "":
			return text
		case e.Message != "":
			return e.Message
		case json.Unmarshal(e.Detail, &text) == nil && text != "":
			return text
		}
	}
	return strings.TrimSpace(string(body))
}

// readSSE calls f with each "data:" payload of a server-sent event stream
// until "[DONE]" or the end of the body.
func readSSE(r io.Reader, f func(data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // comments, event names, blank separators
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			return nil
		}
		if len(data) == 0 {
			continue
		}
		if err := f(data); err != nil {
			return err
		}
	}
	return sc.Err()
}

// genState accumulates one stream.
type genState struct {
	start, first, last time.Time
	n                  int
	prompt             int
	finish             enginev1.FinishReason
	usage              enginev1.Usage
	haveUsage          bool
	sent               int // SGLang: output ids already emitted
}

func (g *genState) result(worker string) *enginev1.GenerateResult {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	u := &enginev1.Usage{PromptTokens: uint32(g.prompt), CompletionTokens: uint32(g.n)}
	if g.haveUsage {
		u = &g.usage
	}
	t := &enginev1.Timing{TotalMs: ms(g.last.Sub(g.start))}
	if g.n > 0 {
		// The engine does not say when the request was first scheduled:
		// arrival → first token is reported as prefill.
		t.PrefillMs = ms(g.first.Sub(g.start))
		if g.n > 1 {
			t.MeanItlMs = ms(g.last.Sub(g.first)) / float64(g.n-1)
		}
	} else {
		t.TotalMs = ms(time.Since(g.start))
	}
	return &enginev1.GenerateResult{FinishReason: g.finish, Usage: u, Timing: t, WorkerId: worker}
}

var finishNames = map[string]enginev1.FinishReason{
	"stop":       enginev1.FinishReason_FINISH_REASON_STOP,
	"eos":        enginev1.FinishReason_FINISH_REASON_STOP,
	"length":     enginev1.FinishReason_FINISH_REASON_LENGTH,
	"abort":      enginev1.FinishReason_FINISH_REASON_ABORT,
	"tool_calls": enginev1.FinishReason_FINISH_REASON_TOOL_CALLS,
}

func finishOf(s string) enginev1.FinishReason {
	if f, ok := finishNames[s]; ok {
		return f
	}
	return enginev1.FinishReason_FINISH_REASON_STOP
}

// --- vLLM: POST /v1/completions -------------------------------------------

func (b *Backend) vllmBody(req *enginev1.GenerateRequest, ret retention, hasRet bool) map[string]any {
	sp := req.GetSampling()
	body := map[string]any{
		"prompt":           req.GetTokenIds(), // a token-id prompt: no tokenization
		"stream":           true,
		"stream_options":   map[string]any{"include_usage": true},
		"return_token_ids": true,
	}
	if sp != nil && sp.Temperature != nil { // unset: the engine's default, not greedy
		body["temperature"] = sp.GetTemperature()
	}
	switch {
	case req.GetLoraName() != "":
		body["model"] = req.GetLoraName() // vLLM selects an adapter by model name
	case b.cfg.Model != "":
		body["model"] = b.cfg.Model
	}
	// No cap: an explicit null, which vLLM reads as what the context window
	// leaves; left out, the completions API's default is 16 tokens.
	body["max_tokens"] = nil
	if n := sp.GetMaxTokens(); n > 0 {
		body["max_tokens"] = n
	}
	if p := sp.GetTopP(); p > 0 {
		body["top_p"] = p
	}
	if s := sp.GetSeed(); s != 0 {
		body["seed"] = s
	}
	if st := sp.GetStopTokenIds(); len(st) > 0 {
		body["stop_token_ids"] = st
	}
	if st := sp.GetStop(); len(st) > 0 {
		// vLLM ends the request at a stop string as it detokenizes; the
		// ids it returns still hold the token that completed it, where the
		// frontend cuts the text.
		body["stop"] = st
	}
	if sp.GetIgnoreEos() {
		body["ignore_eos"] = true
	}
	if salt := req.GetCacheSalt(); salt != "" {
		body["cache_salt"] = salt
	}
	if p := req.GetPriority(); p != 0 && b.cfg.VLLMPriority {
		body["priority"] = p // same convention: lower runs earlier
	}
	if hasRet && b.cfg.VLLMRetention {
		d := map[string]any{"start": 0, "priority": ret.priority}
		if ret.ttl > 0 {
			d["duration"] = ret.ttl
		}
		body["retention_directives"] = []any{d}
		body["retention_scope"] = "session"
	}
	return body
}

type vllmChunk struct {
	Choices []struct {
		Text         string   `json:"text"`
		TokenIDs     []uint32 `json:"token_ids"`
		FinishReason *string  `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        uint32 `json:"prompt_tokens"`
		CompletionTokens    uint32 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens uint32 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	// An error in the stream: {"error": {…}} from vLLM builds since 0.10,
	// the ErrorResponse itself ({"object": "error", "message": …}) from
	// older ones.
	Error   *vllmError `json:"error"`
	Object  string     `json:"object"`
	Message string     `json:"message"`
	Type    string     `json:"type"`
}

type vllmError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
}

func (g *genState) vllmChunk(data []byte) ([]uint32, error) {
	var c vllmChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("bad vLLM chunk: %w", err)
	}
	if c.Error == nil && c.Object == "error" {
		c.Error = &vllmError{Message: c.Message, Type: c.Type}
	}
	if c.Error != nil {
		// vLLM labels whatever fails once the stream has begun a
		// BadRequestError, engine failures included: UNAVAILABLE (the
		// caller's generic stream error), so the turn may move elsewhere.
		return nil, fmt.Errorf("vLLM error (%s): %s", c.Error.Type, c.Error.Message)
	}
	var toks []uint32
	for _, ch := range c.Choices {
		if ch.TokenIDs == nil && ch.Text != "" {
			// A vLLM older than return_token_ids (0.10.2) ignores the
			// field and streams only text: without this the call would
			// succeed with no tokens at all.
			return nil, status.Error(codes.FailedPrecondition, "vLLM streams text without token_ids: the build predates return_token_ids (vLLM 0.10.2)")
		}
		toks = append(toks, ch.TokenIDs...)
		if ch.FinishReason != nil && *ch.FinishReason == "error" {
			// Newer vLLMs end a request that failed inside the engine so.
			return nil, status.Error(codes.Internal, "vLLM ended the request with finish_reason \"error\"")
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			g.finish = finishOf(*ch.FinishReason)
		}
	}
	if u := c.Usage; u != nil {
		g.haveUsage = true
		g.usage.PromptTokens, g.usage.CompletionTokens = u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil { // needs --enable-prompt-tokens-details
			g.usage.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	return toks, nil
}

// --- SGLang: POST /generate -------------------------------------------------

func (b *Backend) sglangBody(req *enginev1.GenerateRequest, ret retention, hasRet bool) map[string]any {
	sp := req.GetSampling()
	params := map[string]any{}
	if sp != nil && sp.Temperature != nil { // unset: the engine's default, not greedy
		params["temperature"] = sp.GetTemperature()
	}
	// No cap: an explicit null, which SGLang reads as what the context
	// window leaves; left out, its default is 128 tokens.
	params["max_new_tokens"] = nil
	if n := sp.GetMaxTokens(); n > 0 {
		params["max_new_tokens"] = n
	}
	if p := sp.GetTopP(); p > 0 {
		params["top_p"] = p
	}
	if st := sp.GetStopTokenIds(); len(st) > 0 {
		params["stop_token_ids"] = st
	}
	if st := sp.GetStop(); len(st) > 0 {
		params["stop"] = st // as vLLM's: the request ends at a stop string
	}
	if sp.GetIgnoreEos() {
		params["ignore_eos"] = true
	}
	if s := sp.GetSeed(); s != 0 {
		params["sampling_seed"] = s
	}
	// SGLang rejects unknown fields: optional ones are sent only when set.
	body := map[string]any{
		"input_ids":       req.GetTokenIds(),
		"sampling_params": params,
		"stream":          true,
		"rid":             req.GetRequestId(),
	}
	if l := req.GetLoraName(); l != "" {
		body["lora_path"] = l
	}
	if salt := req.GetCacheSalt(); salt != "" {
		body["cache_salt"] = salt
	}
	if hasRet {
		body["priority"] = ret.priority
		if ret.ttl > 0 {
			body["retention_seconds"] = ret.ttl
		}
	}
	return body
}

type sglangChunk struct {
	OutputIDs []uint32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason     json.RawMessage `json:"finish_reason"`
		PromptTokens     *uint32         `json:"prompt_tokens"`
		CompletionTokens *uint32         `json:"completion_tokens"`
		CachedTokens     *uint32         `json:"cached_tokens"`
	} `json:"meta_info"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (g *genState) sglangChunk(data []byte) ([]uint32, error) {
	var c sglangChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("bad SGLang chunk: %w", err)
	}
	if c.Error != nil {
		// SGLang reports a request it refuses (a prompt past the context
		// length, …) as a ValueError: HTTP 400 when not streaming, this
		// chunk when streaming. The request's fault: moving it to another
		// worker would fail the same way.
		return nil, status.Errorf(codes.InvalidArgument, "SGLang error: %s", c.Error.Message)
	}
	m := c.MetaInfo
	// Older servers stream the whole output so far, newer ones (and
	// --incremental-streaming-output) only the new ids: cumulative when the
	// list is as long as the completion count.
	toks := c.OutputIDs
	if m.CompletionTokens != nil && int(*m.CompletionTokens) == len(c.OutputIDs) && len(c.OutputIDs) >= g.sent {
		toks = c.OutputIDs[g.sent:]
	}
	g.sent += len(toks)
	if m.PromptTokens != nil {
		g.haveUsage = true
		g.usage.PromptTokens = *m.PromptTokens
	}
	if m.CompletionTokens != nil {
		g.haveUsage = true
		g.usage.CompletionTokens = *m.CompletionTokens
	}
	if m.CachedTokens != nil {
		g.usage.CachedTokens = *m.CachedTokens
	}
	if len(m.FinishReason) > 0 && string(m.FinishReason) != "null" {
		var fr struct {
			Type       string          `json:"type"`
			Message    string          `json:"message"`
			StatusCode json.RawMessage `json:"status_code"`
		}
		if err := json.Unmarshal(m.FinishReason, &fr); err != nil {
			var s string
			if json.Unmarshal(m.FinishReason, &s) != nil {
				return nil, fmt.Errorf("bad SGLang finish_reason %s", m.FinishReason)
			}
			fr.Type = s
		}
		// SGLang's scheduler aborts a request it cannot serve (longer than
		// its token budget, …) with an HTTP status: that is an error with
		// the engine's status, not a generation that ended.
		if code, err := strconv.Atoi(string(fr.StatusCode)); fr.Type == "abort" && err == nil && code >= 400 {
			return nil, httpStatus(code, fr.Message)
		}
		g.finish = finishOf(fr.Type)
	}
	return toks, nil
}
