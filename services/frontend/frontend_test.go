package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	"switchyard.dev/pkg/chat"
	"switchyard.dev/services/servicekit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// Keep-alive connections of the test clients are not leaks.
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func post(t *testing.T, url string, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// postOK is post for a request that must succeed.
func postOK(t *testing.T, url string, body string, hdr ...string) *http.Response {
	t.Helper()
	resp := post(t, url, body, hdr...)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
	}
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const turn1 = `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the whole world and then stop, please, thank you very much."}]}`

func TestChatNonStream(t *testing.T) {
	m := newMesh(t, nil)
	resp := post(t, m.url+"/v1/chat/completions", turn1, "x-dynamo-session-id", "sess-1", "x-dynamo-parent-session-id", "root-0")
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Switchyard-Worker"); got != "worker-7" {
		t.Errorf("X-Switchyard-Worker = %q", got)
	}
	var cc chat.ChatCompletion
	if err := json.Unmarshal([]byte(body), &cc); err != nil {
		t.Fatal(err)
	}
	if cc.Object != "chat.completion" || len(cc.Choices) != 1 || cc.Choices[0].Message.Content == nil ||
		*cc.Choices[0].Message.Content != " Hello there, agent. All good." || cc.Choices[0].FinishReason != "stop" {
		t.Fatalf("unexpected completion: %s", body)
	}
	if cc.Usage == nil || cc.Usage.PromptTokens == 0 || cc.Usage.CompletionTokens == 0 || cc.Usage.PromptTokensDetails == nil {
		t.Fatalf("usage: %s", body)
	}
	route := m.sched.lastRoute()
	if a := route.GetAgent(); a.GetSessionId() != "sess-1" || a.GetParentSessionId() != "root-0" || a.GetTenant() != AnonymousTenant ||
		a.GetHarness() != "dynamo" || a.GetInputTrigger() != agentv1.InputTrigger_INPUT_TRIGGER_USER_MESSAGE {
		t.Errorf("route agent = %v", a)
	}
	if int(route.GetPromptTokens()) != int(cc.Usage.PromptTokens) || len(route.GetBlockHashes()) != int(route.GetPromptTokens())/16 {
		t.Errorf("route prompt %d tokens, %d hashes; usage %d", route.GetPromptTokens(), len(route.GetBlockHashes()), cc.Usage.PromptTokens)
	}
	m.waitFinish(t)
	fin := m.sched.finishes[0]
	if fin.GetWorkerId() != "worker-7" || fin.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_STOP || fin.GetUsage().GetCompletionTokens() == 0 {
		t.Errorf("finish = %v", fin)
	}
}

// sseEvents reads "data:" payloads (and event names) of an SSE stream.
func sseEvents(t *testing.T, r io.Reader) (events []string, datas []string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	ev := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			events = append(events, ev)
			datas = append(datas, strings.TrimPrefix(line, "data: "))
			ev = ""
		}
	}
	return events, datas
}

func TestChatStreamWithUsageAndCachedSecondTurn(t *testing.T) {
	m := newMesh(t, nil)
	stream := func(body string) (text string, usage *chat.ChatUsage, worker string) {
		resp := postOK(t, m.url+"/v1/chat/completions", body, "x-session-id", "ses_abc")
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("content type %q", ct)
		}
		_, datas := sseEvents(t, resp.Body)
		if len(datas) < 4 || datas[len(datas)-1] != "[DONE]" {
			t.Fatalf("stream = %q", datas)
		}
		var b strings.Builder
		for i, d := range datas[:len(datas)-1] {
			var ch chat.ChatCompletionChunk
			if err := json.Unmarshal([]byte(d), &ch); err != nil {
				t.Fatalf("chunk %q: %v", d, err)
			}
			if ch.Object != "chat.completion.chunk" {
				t.Fatalf("object %q", ch.Object)
			}
			if string(ch.Usage) != "null" && i != len(datas)-2 {
				t.Fatalf("usage before the last chunk: %s", d)
			}
			if i == 0 && (len(ch.Choices) != 1 || ch.Choices[0].Delta.Role != "assistant") {
				t.Fatalf("first chunk lacks the role: %s", d)
			}
			if i == len(datas)-3 && (ch.Choices[0].FinishReason == nil || *ch.Choices[0].FinishReason != "stop") {
				t.Fatalf("finish chunk: %s", d)
			}
			if i == len(datas)-2 {
				if len(ch.Choices) != 0 {
					t.Fatalf("usage chunk has choices: %s", d)
				}
				usage = new(chat.ChatUsage)
				json.Unmarshal(ch.Usage, usage)
			} else if len(ch.Choices) == 1 && ch.Choices[0].Delta.Content != nil {
				b.WriteString(*ch.Choices[0].Delta.Content)
			}
		}
		return b.String(), usage, resp.Header.Get("X-Switchyard-Worker")
	}
	text, u1, w1 := stream(strings.Replace(turn1, `"messages"`, `"stream":true,"stream_options":{"include_usage":true},"messages"`, 1))
	if text != " Hello there, agent. All good." || w1 != "worker-7" {
		t.Fatalf("text %q worker %q", text, w1)
	}
	if u1 == nil || u1.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("turn 1 usage %+v", u1)
	}
	m.waitFinish(t)
	turn2 := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the whole world and then stop, please, thank you very much."},{"role":"assistant","content":" Hello there, agent. All good."},{"role":"user","content":"Again."}]}`
	_, u2, w2 := stream(turn2)
	if w2 != w1 || u2 == nil || u2.PromptTokensDetails.CachedTokens == 0 || u2.PromptTokensDetails.CachedTokens%16 != 0 {
		t.Fatalf("turn 2: worker %q usage %+v", w2, u2)
	}
	m.waitFinish(t)
	if r := kept(m.svc.sessions, sessionKey(AnonymousTenant, "ses_abc"), promptOf); r == nil {
		t.Fatal("session state not kept")
	}
	// Turn 2's body extends turn 1's: its first messages were not decoded again.
	if b := kept(m.svc.sessions, sessionKey(AnonymousTenant, "ses_abc"), func(e *sessionEntry) **chat.PrevBody { return &e.prevBody }); b == nil || b.Reused() != 2 {
		t.Fatalf("turn 2's body reused %v", b)
	}
}

func TestChatStreamWithoutUsage(t *testing.T) {
	m := newMesh(t, nil)
	resp := post(t, m.url+"/v1/chat/completions", strings.Replace(turn1, `"messages"`, `"stream":true,"messages"`, 1))
	_, datas := sseEvents(t, resp.Body)
	for _, d := range datas {
		if strings.Contains(d, `"usage"`) {
			t.Fatalf("usage without include_usage: %s", d)
		}
	}
	if datas[len(datas)-1] != "[DONE]" {
		t.Fatal("no [DONE]")
	}
}

func TestChatToolCalls(t *testing.T) {
	m := toolMesh(t)
	body := `{"model":"m","stream":%s,"tools":[{"type":"function","function":{"name":"read","description":"Read a file","parameters":{"type":"object","properties":{"filePath":{"type":"string"}},"required":["filePath"]}}}],"messages":[{"role":"user","content":"Read hello.txt"}]}`
	// Non-streamed.
	resp := post(t, m.url+"/v1/chat/completions", strings.Replace(body, "%s", "false", 1))
	var cc chat.ChatCompletion
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &cc); err != nil {
		t.Fatal(err)
	}
	msg := cc.Choices[0].Message
	if cc.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "read" ||
		msg.ToolCalls[0].Function.Arguments != `{"filePath":""}` || !strings.HasPrefix(msg.ToolCalls[0].ID, "call_") {
		t.Fatalf("tool call = %+v", cc.Choices[0])
	}
	if msg.Content == nil || strings.Contains(*msg.Content, "tool_call") {
		t.Fatalf("content leaked the call: %v", msg.Content)
	}
	m.waitFinish(t)
	if names := m.sched.finishes[0].GetToolCallNames(); len(names) != 1 || names[0] != "read" {
		t.Errorf("finish tool names %v", names)
	}
	// Streamed.
	resp = post(t, m.url+"/v1/chat/completions", strings.Replace(body, "%s", "true", 1))
	_, datas := sseEvents(t, resp.Body)
	var calls, finish int
	for _, d := range datas[:len(datas)-1] {
		var ch chat.ChatCompletionChunk
		json.Unmarshal([]byte(d), &ch)
		for _, c := range ch.Choices {
			if len(c.Delta.ToolCalls) > 0 {
				tc := c.Delta.ToolCalls[0]
				if tc.Index == nil || *tc.Index != 0 || tc.Function.Name != "read" || tc.Type != "function" {
					t.Fatalf("tool call delta %s", d)
				}
				calls++
			}
			if c.Delta.Content != nil && strings.Contains(*c.Delta.Content, "<tool") {
				t.Fatalf("tag leaked: %s", d)
			}
			if c.FinishReason != nil && *c.FinishReason == "tool_calls" {
				finish++
			}
		}
	}
	if calls != 1 || finish != 1 {
		t.Fatalf("calls %d finish %d in %q", calls, finish, datas)
	}
	// The tool result turn is classified as such and is not forced to call.
	m.waitFinish(t)
	next := `{"model":"m","tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"Read hello.txt"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"filePath\":\"hello.txt\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"hello"}]}`
	resp = post(t, m.url+"/v1/chat/completions", next)
	json.Unmarshal([]byte(readAll(t, resp.Body)), &cc)
	if cc.Choices[0].FinishReason != "stop" {
		t.Fatalf("after a tool result: %+v", cc.Choices[0])
	}
	if tr := m.sched.lastRoute().GetAgent().GetInputTrigger(); tr != agentv1.InputTrigger_INPUT_TRIGGER_TOOL_RESULT {
		t.Fatalf("trigger %v", tr)
	}
}

func TestChatErrors(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.MaxBodyBytes = 4096; c.MaxContextTokens = 100 })
	long := `{"messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`
	tests := []struct {
		name   string
		body   string
		hdr    []string
		status int
		param  string
		code   string
	}{
		{name: "invalid session id", body: turn1, hdr: []string{"x-dynamo-session-id", "bad id"}, status: 400, param: "x-dynamo-session-id", code: "invalid_session_id"},
		{name: "session id too long", body: turn1, hdr: []string{"x-session-id", strings.Repeat("x", 257)}, status: 400, param: "x-session-id", code: "invalid_session_id"},
		{name: "bad json", body: `{"messages":`, status: 400},
		{name: "no messages", body: `{"model":"m","messages":[]}`, status: 400, param: "messages"},
		{name: "bad role", body: `{"messages":[{"role":"wizard","content":"x"}]}`, status: 400, param: "messages[0].role"},
		{name: "n=2", body: `{"n":2,"messages":[{"role":"user","content":"x"}]}`, status: 400, param: "n"},
		{name: "image part", body: `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, status: 400, param: "messages[0].content[0].type"},
		{name: "too large", body: `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}]}`, status: 413},
		{name: "context length", body: long, status: 400, param: "messages", code: "context_length_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, m.url+"/v1/chat/completions", tt.body, tt.hdr...)
			body := readAll(t, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			checkErrorBody(t, false, body, upstreamCase{kind: "invalid_request_error", param: tt.param, code: tt.code})
		})
	}
	if n := len(m.sched.routes); n != 0 {
		t.Fatalf("%d bad requests reached the scheduler", n)
	}
}

func TestSchedulerErrorsMapToStatus(t *testing.T) {
	// Unavailable is retried for the budget first (migrate_test.go).
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.RouteRetryBudget = 100 * time.Millisecond })
	for code, want := range map[codes.Code]int{
		codes.Unavailable:       503,
		codes.ResourceExhausted: 429,
		codes.Internal:          502,
		codes.InvalidArgument:   500, // the frontend's own malformed call, not the client's
	} {
		m.sched.mu.Lock()
		m.sched.routeErr = status.Error(code, "nope")
		m.sched.mu.Unlock()
		resp := post(t, m.url+"/v1/chat/completions", turn1)
		body := readAll(t, resp.Body)
		if resp.StatusCode != want || !strings.Contains(body, `"error"`) {
			t.Errorf("%v: status %d body %s", code, resp.StatusCode, body)
		}
	}
}

func TestClientDisconnectCancelsGenerate(t *testing.T) {
	m := newMesh(t, func(_ *Config, s *fakeShim) { s.hang = true })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.url+"/v1/chat/completions",
		strings.NewReader(strings.Replace(turn1, `"messages"`, `"stream":true,"messages"`, 1)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-m.shim.started
	// The first chunks arrived; now the client goes away.
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q", line)
	}
	cancel()
	resp.Body.Close()
	<-m.shim.cancelled
	m.waitFinish(t)
	m.sched.mu.Lock()
	fin := m.sched.finishes[0]
	m.sched.mu.Unlock()
	if fin.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_ABORT {
		t.Fatalf("finish reason %v", fin.GetFinishReason())
	}
}

func TestModelsAndRoot(t *testing.T) {
	m := newMesh(t, nil)
	resp, err := http.Get(m.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.Unmarshal([]byte(readAll(t, resp.Body)), &list)
	resp.Body.Close()
	// The served model first, then its aliases (newMesh's).
	if list.Object != "list" || len(list.Data) != 4 || list.Data[0].ID != "switchyard-sim" || list.Data[1].ID != "m" {
		t.Fatalf("models = %+v", list)
	}
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		req, _ := http.NewRequest(method, m.url+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s / = %d", method, resp.StatusCode)
		}
	}
	for id, want := range map[string]int{"switchyard-sim": 200, "m": 200, "other": 404} {
		resp, _ = http.Get(m.url + "/v1/models/" + id)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET /v1/models/%s = %d, want %d", id, resp.StatusCode, want)
		}
	}
	// An Anthropic client (anthropic-version) reads Anthropic's error JSON.
	req, _ := http.NewRequest(http.MethodGet, m.url+"/v1/models/other", nil)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp.Body); resp.StatusCode != 404 || !strings.Contains(b, `"type":"error"`) || !strings.Contains(b, `"not_found_error"`) {
		t.Errorf("GET /v1/models/other as an Anthropic client: %d %s", resp.StatusCode, b)
	}
}

// TestWrongMethodIsAPIError: another method on an API path is a 405 in the
// API's own error shape, with Allow, not the admin gateway's 404.
func TestWrongMethodIsAPIError(t *testing.T) {
	m := newMesh(t, nil)
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/chat/completions", "POST"},
		{http.MethodGet, "/v1/responses", "POST"},
		{http.MethodPut, "/v1/messages", "POST"},
		{http.MethodGet, "/v1/messages/count_tokens", "POST"},
		{http.MethodPost, "/v1/models", "GET, HEAD"},
		{http.MethodDelete, "/v1/models/switchyard-sim", "GET, HEAD"},
	} {
		req, _ := http.NewRequest(tt.method, m.url+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(body), &e)
		anthropic := strings.HasPrefix(tt.path, "/v1/messages")
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != tt.allow || e.Error.Type != "invalid_request_error" ||
			e.Error.Message == "" || (e.Type == "error") != anthropic {
			t.Errorf("%s %s: %d Allow=%q %s", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), body)
		}
	}
}

func TestAdminSessions(t *testing.T) {
	m := newMesh(t, nil)
	resp := post(t, m.url+"/v1/chat/completions", turn1, "X-Claude-Code-Session-Id", "root-1", "X-Claude-Code-Agent-Id", "kid-1")
	readAll(t, resp.Body)
	m.waitFinish(t)
	conn, err := servicekit.Dial(m.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := frontendv1.NewFrontendAdminServiceClient(conn)
	ctx := context.Background()
	list, err := c.ListSessions(ctx, &frontendv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetSessions()) != 1 {
		t.Fatalf("sessions = %v", list)
	}
	s := list.GetSessions()[0]
	if s.GetAgent().GetSessionId() != "kid-1" || s.GetAgent().GetParentSessionId() != "root-1" || s.GetTurns() != 1 ||
		s.GetLastWorkerId() != "worker-7" || s.GetPromptTokens() == 0 || s.GetAgent().GetHarness() != "claude-code" {
		t.Fatalf("session = %v", s)
	}
	got, err := c.GetSession(ctx, &frontendv1.GetSessionRequest{SessionId: "kid-1"})
	if err != nil || got.GetSession().GetTurns() != 1 {
		t.Fatalf("GetSession = %v, %v", got, err)
	}
	if _, err := c.GetSession(ctx, &frontendv1.GetSessionRequest{SessionId: "kid-1", Tenant: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("other tenant sees the session: %v", err)
	}
	// REST through the gateway.
	resp2, err := http.Get(m.url + "/v1/admin/sessions/kid-1")
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != 200 || !strings.Contains(b, `"lastWorkerId":"worker-7"`) {
		t.Fatalf("gateway GetSession = %d %s", resp2.StatusCode, b)
	}
}

// TestAdminSessionIDWithSlash: a session id holding '/' (tenant-scoped
// ids, "acme/s@7") is addressable in the admin REST path escaped
// (encodeURIComponent's "%2F"), as in the console's trace path; the list and
// ids without '/' keep their routes, and the query still reaches the call.
func TestAdminSessionIDWithSlash(t *testing.T) {
	m := newMesh(t, nil)
	const id = "acme/s@7"
	for _, session := range []string{id, "plain"} {
		postOK(t, m.url+"/v1/chat/completions", turn1, "x-session-id", session)
		m.waitFinish(t)
	}
	escaped := url.PathEscape(id) // acme%2Fs@7, as encodeURIComponent's acme%2Fs%407
	for _, path := range []string{"/v1/admin/sessions/" + escaped, "/v1/admin/sessions/acme%2Fs%407"} {
		var got frontendv1.GetSessionResponse
		code, b := getAdmin(t, m, path)
		if err := protojson.Unmarshal([]byte(b), &got); code != 200 || err != nil || got.GetSession().GetAgent().GetSessionId() != id {
			t.Errorf("GET %s: %d %s, want session %q", path, code, b, id)
		}
	}
	if code, b := getAdmin(t, m, "/v1/admin/sessions/"+escaped+"?tenant=other"); code != 404 || !strings.Contains(b, `tenant \"other\"`) {
		t.Errorf("GET %s?tenant=other: %d %s, want the query's tenant's 404", escaped, code, b)
	}
	for path, want := range map[string]string{"/v1/admin/sessions/plain": `"sessionId":"plain"`, "/v1/admin/sessions": `"totals"`} {
		if code, b := getAdmin(t, m, path); code != 200 || !strings.Contains(b, want) {
			t.Errorf("GET %s: %d %s, want %s", path, code, b, want)
		}
	}
	if code, b := getAdmin(t, m, "/console/sessions/anonymous/"+url.PathEscape(id)+"/perfetto"); code != 200 || !strings.Contains(b, id) {
		t.Errorf("the console's trace of %q: %d %.200s", id, code, b)
	}
}

func TestTenantsAndSalt(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.APIKeys = map[string]string{"k-a": "acme", "k-b": "bravo"} })
	resp := post(t, m.url+"/v1/chat/completions", turn1)
	if b := readAll(t, resp.Body); resp.StatusCode != 401 || !strings.Contains(b, "invalid_api_key") {
		t.Fatalf("no key: %d %s", resp.StatusCode, b)
	}
	hashes := map[string][]uint64{}
	for _, k := range []string{"k-a", "k-b"} {
		resp := post(t, m.url+"/v1/chat/completions", turn1, "Authorization", "Bearer "+k, "x-session-id", "same")
		readAll(t, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", k, resp.StatusCode)
		}
		m.waitFinish(t)
		r := m.sched.lastRoute()
		hashes[r.GetAgent().GetTenant()] = r.GetBlockHashes()
	}
	if len(hashes["acme"]) == 0 || len(hashes["bravo"]) == 0 || hashes["acme"][0] == hashes["bravo"][0] {
		t.Fatalf("tenants share block hashes: %v", hashes)
	}
	if kept(m.svc.sessions, sessionKey("acme", "same"), promptOf) == nil || kept(m.svc.sessions, sessionKey("bravo", "same"), promptOf) == nil {
		t.Fatal("same session id of two tenants must be two sessions")
	}

	// The admin API shows a tenant only its own sessions, over REST and gRPC.
	get := func(path string, header ...string) (int, string) { return getAdmin(t, m, path, header...) }
	if code, b := get("/v1/admin/sessions"); code != 401 {
		t.Fatalf("admin list without a key: %d %s", code, b)
	}
	if code, b := get("/v1/admin/sessions", "Authorization", "Bearer k-a"); code != 200 || !strings.Contains(b, `"acme"`) || strings.Contains(b, "bravo") {
		t.Fatalf("acme's admin list: %d %s", code, b)
	}
	if code, b := get("/v1/admin/sessions/same?tenant=bravo", "Authorization", "Bearer k-a"); code != 403 {
		t.Fatalf("acme reading bravo's session: %d %s", code, b)
	}
	conn, err := servicekit.Dial(m.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := frontendv1.NewFrontendAdminServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-b")
	got, err := admin.GetSession(ctx, &frontendv1.GetSessionRequest{SessionId: "same"})
	if err != nil || got.GetSession().GetAgent().GetTenant() != "bravo" {
		t.Fatalf("bravo's GetSession over gRPC: %v %v", got, err)
	}
}

// TestPrefillReportAndPriority: the route's engine priority and retention
// reach the shim, and the first token is reported to the scheduler before
// the turn's end.
func TestPrefillReportAndPriority(t *testing.T) {
	m := newMesh(t, nil)
	m.sched.mu.Lock()
	m.sched.priority, m.sched.retention = 2, 300
	m.sched.mu.Unlock()
	resp := post(t, m.url+"/v1/chat/completions", turn1, "x-dynamo-session-id", "sess-1")
	if body := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	m.waitFinish(t)
	m.shim.mu.Lock()
	gen := m.shim.reqs[0]
	m.shim.mu.Unlock()
	if gen.GetPriority() != 2 || gen.GetRetentionSeconds() != 300 {
		t.Errorf("GenerateRequest priority %d, retention %d s, want 2 and 300", gen.GetPriority(), gen.GetRetentionSeconds())
	}
	id := gen.GetRequestId()
	m.sched.mu.Lock()
	events := strings.Join(m.sched.events, " ")
	m.sched.mu.Unlock()
	if want := id + ":route " + id + ":prefilled " + id + ":finish"; events != want {
		t.Errorf("scheduler calls\n got %s\nwant %s", events, want)
	}
}

// Without a cap from the client or the operator the engine is sent none: its
// own context window decides, as vLLM's and OpenAI's do (a fixed default cut
// agents' long answers: Codex sends no cap). An operator's default is sent.
func TestNoOutputCapLeavesItToTheEngine(t *testing.T) {
	for _, tc := range []struct {
		def  int
		want uint32
	}{{0, 0}, {100, 100}} {
		m := newMesh(t, func(c *Config, _ *fakeShim) { c.DefaultMaxTokens = tc.def })
		resp := post(t, m.url+"/v1/chat/completions", turn1)
		if body := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		m.waitFinish(t)
		if got := m.shim.requests()[0].GetSampling().GetMaxTokens(); got != tc.want {
			t.Errorf("--default-max-tokens %d: the engine was sent max_tokens %d, want %d", tc.def, got, tc.want)
		}
		if got := m.sched.lastRoute().GetMaxTokens(); got != tc.want {
			t.Errorf("--default-max-tokens %d: the route said max_tokens %d, want %d", tc.def, got, tc.want)
		}
	}
}
