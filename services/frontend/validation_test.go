package frontend

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard.dev/pkg/chat"
)

// upstreamCase is one request and the answer the API it imitates gives it:
// a status, and for an error the error type in that API's own shape, the
// field it names (OpenAI's param; named in Anthropic's message) and OpenAI's
// code. docs/api-compatibility.md has a row for each.
type upstreamCase struct {
	name   string
	path   string // default: the API's endpoint
	body   string
	status int
	kind   string // error type; "" for a 200
	param  string
	code   string
}

const (
	chatTools = `"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]`
	chatCall  = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]}`
	msgTool   = `"tools":[{"name":"read","input_schema":{"type":"object"}}]`
	msgCall   = `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{}}]}`
	respTools = `"tools":[{"type":"function","name":"read","parameters":{"type":"object"}}]`
	respCall  = `{"type":"function_call","call_id":"c1","name":"read","arguments":"{}"}`
)

func chatBody(extra, msgs string) string {
	return `{"model":"m",` + extra + `"messages":[` + msgs + `]}`
}

func msgsBody(extra, msgs string) string {
	return `{"model":"claude-x","max_tokens":16,` + extra + `"messages":[` + msgs + `]}`
}

func respBody(extra, input string) string {
	return `{"model":"gpt-x",` + extra + `"input":[` + input + `]}`
}

const (
	hiUser  = `{"role":"user","content":"hi"}`
	hiItem  = `{"type":"message","role":"user","content":"hi"}`
	badUTF8 = "\xff\xfe"
)

var chatCases = []upstreamCase{
	{name: "unknown model", body: `{"model":"nope","messages":[` + hiUser + `]}`, status: 404, kind: "invalid_request_error", code: "model_not_found"},
	{name: "no model is the served one", body: `{"messages":[` + hiUser + `]}`, status: 200},
	{name: "invalid UTF-8", body: chatBody("", `{"role":"user","content":"`+badUTF8+`"}`), status: 400, kind: "invalid_request_error"},
	{name: "bad JSON", body: `{"messages":`, status: 400, kind: "invalid_request_error"},
	{name: "tool_choice names an undeclared function", body: chatBody(chatTools+`,"tool_choice":{"type":"function","function":{"name":"write"}},`, hiUser), status: 400, kind: "invalid_request_error", param: "tool_choice"},
	{name: "tool_choice names a declared function", body: chatBody(chatTools+`,"tool_choice":{"type":"function","function":{"name":"read"}},`, hiUser), status: 200},
	{name: "tool_choice required without tools", body: chatBody(`"tool_choice":"required",`, hiUser), status: 400, kind: "invalid_request_error", param: "tool_choice"},
	{name: "tool_choice required with empty tools", body: chatBody(`"tools":[],"tool_choice":"required",`, hiUser), status: 200},
	{name: "tool_choice auto without tools", body: chatBody(`"tool_choice":"auto",`, hiUser), status: 200},
	{name: "tool_choice unknown mode", body: chatBody(chatTools+`,"tool_choice":"sometimes",`, hiUser), status: 400, kind: "invalid_request_error", param: "tool_choice"},
	{name: "tool message answers no call", body: chatBody(chatTools+",", hiUser+`,{"role":"tool","tool_call_id":"c9","content":"x"}`), status: 400, kind: "invalid_request_error", param: "messages[1].role"},
	{name: "tool message without tool_call_id", body: chatBody(chatTools+",", hiUser+","+chatCall+`,{"role":"tool","content":"x"}`), status: 400, kind: "invalid_request_error", param: "messages[2].tool_call_id"},
	{name: "call left unanswered", body: chatBody(chatTools+",", hiUser+","+chatCall+","+hiUser), status: 400, kind: "invalid_request_error", param: "messages[1].tool_calls"},
	{name: "call answered", body: chatBody(chatTools+",", hiUser+","+chatCall+`,{"role":"tool","tool_call_id":"c1","content":"x"}`), status: 200},
	{name: "unknown content part type", body: chatBody("", `{"role":"user","content":[{"type":"banana","text":"x"}]}`), status: 400, kind: "invalid_request_error", param: "messages[0].content[0].type"},
	{name: "stream_options without stream", body: chatBody(`"stream_options":{"include_usage":true},`, hiUser), status: 400, kind: "invalid_request_error", param: "stream_options"},
	{name: "function name outside its pattern", body: chatBody(`"tools":[{"type":"function","function":{"name":"read file"}}],`, hiUser), status: 400, kind: "invalid_request_error", param: "tools[0].function.name"},
	{name: "temperature above 2", body: chatBody(`"temperature":2.5,`, hiUser), status: 400, kind: "invalid_request_error", param: "temperature"},
	{name: "temperature below 0", body: chatBody(`"temperature":-0.5,`, hiUser), status: 400, kind: "invalid_request_error", param: "temperature"},
	{name: "top_p above 1", body: chatBody(`"top_p":1.5,`, hiUser), status: 400, kind: "invalid_request_error", param: "top_p"},
	{name: "max_tokens 0", body: chatBody(`"max_tokens":0,`, hiUser), status: 400, kind: "invalid_request_error", param: "max_tokens"},
	{name: "max_completion_tokens 0", body: chatBody(`"max_completion_tokens":0,`, hiUser), status: 400, kind: "invalid_request_error", param: "max_completion_tokens"},
	{name: "max_tokens past the context window", body: chatBody(`"max_tokens":9223372036854775800,`, hiUser), status: 400, kind: "invalid_request_error", param: "max_tokens", code: "context_length_exceeded"},
	{name: "max_completion_tokens past the context window", body: chatBody(`"max_completion_tokens":9223372036854775800,`, hiUser), status: 400, kind: "invalid_request_error", param: "max_completion_tokens", code: "context_length_exceeded"},
	{name: "max_completion_tokens past the context window beside max_tokens", body: chatBody(`"max_tokens":16,"max_completion_tokens":9223372036854775800,`, hiUser), status: 400, kind: "invalid_request_error", param: "max_completion_tokens", code: "context_length_exceeded"},
	{name: "five stop sequences", body: chatBody(`"stop":["a","b","c","d","e"],`, hiUser), status: 400, kind: "invalid_request_error", param: "stop"},
	{name: "n above 1", body: chatBody(`"n":2,`, hiUser), status: 400, kind: "invalid_request_error", param: "n"},
	{name: "empty messages", body: chatBody("", ""), status: 400, kind: "invalid_request_error", param: "messages"},
	{name: "unknown role", body: chatBody("", `{"role":"wizard","content":"x"}`), status: 400, kind: "invalid_request_error", param: "messages[0].role"},
}

var messagesCases = []upstreamCase{
	{name: "unknown model", body: `{"model":"claude-nope","max_tokens":16,"messages":[` + hiUser + `]}`, status: 404, kind: "not_found_error"},
	{name: "unknown model in count_tokens", path: "/v1/messages/count_tokens", body: `{"model":"claude-nope","messages":[` + hiUser + `]}`, status: 404, kind: "not_found_error"},
	{name: "invalid UTF-8", body: msgsBody("", `{"role":"user","content":"`+badUTF8+`"}`), status: 400, kind: "invalid_request_error"},
	{name: "bad JSON", body: `{"messages":`, status: 400, kind: "invalid_request_error"},
	{name: "tool_choice names an undeclared tool", body: msgsBody(msgTool+`,"tool_choice":{"type":"tool","name":"write"},`, hiUser), status: 400, kind: "invalid_request_error", param: "tool_choice"},
	{name: "tool_choice names a declared tool", body: msgsBody(msgTool+`,"tool_choice":{"type":"tool","name":"read"},`, hiUser), status: 200},
	{name: "tool_choice unknown type", body: msgsBody(msgTool+`,"tool_choice":{"type":"sometimes"},`, hiUser), status: 400, kind: "invalid_request_error", param: "tool_choice"},
	{name: "tool_result answers no tool_use", body: msgsBody(msgTool+",", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":"x"}]}`), status: 400, kind: "invalid_request_error", param: "messages"},
	{name: "tool_use left unanswered", body: msgsBody(msgTool+",", hiUser+","+msgCall+","+hiUser), status: 400, kind: "invalid_request_error", param: "messages"},
	{name: "tool_use answered", body: msgsBody(msgTool+",", hiUser+","+msgCall+`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}`), status: 200},
	{name: "unknown content block type", body: msgsBody("", `{"role":"user","content":[{"type":"banana"}]}`), status: 400, kind: "invalid_request_error", param: "messages.0.content.0.type"},
	{name: "tool_use without id", body: msgsBody(msgTool+",", hiUser+`,{"role":"assistant","content":[{"type":"tool_use","name":"read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"","content":"x"}]}`), status: 400, kind: "invalid_request_error", param: "messages.1.content.0.id"},
	{name: "tool_use without name", body: msgsBody(msgTool+",", hiUser+`,{"role":"assistant","content":[{"type":"tool_use","id":"t1","input":{}}]}`), status: 400, kind: "invalid_request_error", param: "messages.1.content.0.name"},
	{name: "tool_result without tool_use_id", body: msgsBody(msgTool+",", hiUser+","+msgCall+`,{"role":"user","content":[{"type":"tool_result","content":"x"}]}`), status: 400, kind: "invalid_request_error", param: "messages.2.content.0.tool_use_id"},
	{name: "unknown tool_result content type", body: msgsBody(msgTool+",", hiUser+","+msgCall+`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"banana"}]}]}`), status: 400, kind: "invalid_request_error", param: "messages.2.content.0.content.0.type"},
	{name: "known block the mesh skips", body: msgsBody("", `{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},{"type":"text","text":"what is it?"}]}`), status: 200},
	{name: "temperature above 1", body: msgsBody(`"temperature":1.5,`, hiUser), status: 400, kind: "invalid_request_error", param: "temperature"},
	{name: "top_p above 1", body: msgsBody(`"top_p":1.5,`, hiUser), status: 400, kind: "invalid_request_error", param: "top_p"},
	{name: "no max_tokens", body: `{"model":"claude-x","messages":[` + hiUser + `]}`, status: 400, kind: "invalid_request_error", param: "max_tokens"},
	{name: "max_tokens past the context window", body: `{"model":"claude-x","max_tokens":9223372036854775800,"messages":[` + hiUser + `]}`, status: 400, kind: "invalid_request_error", param: "max_tokens"},
	{name: "empty messages", body: msgsBody("", ""), status: 400, kind: "invalid_request_error", param: "messages"},
	{name: "unknown role", body: msgsBody("", `{"role":"wizard","content":"x"}`), status: 400, kind: "invalid_request_error", param: "messages.0.role"},
	{name: "system role in messages", body: msgsBody("", hiUser+`,{"role":"system","content":"be brief"}`), status: 200},
}

var responsesCases = []upstreamCase{
	{name: "unknown model", body: `{"model":"gpt-nope","input":"hi"}`, status: 404, kind: "invalid_request_error", code: "model_not_found"},
	{name: "invalid UTF-8", body: `{"model":"gpt-x","input":"` + badUTF8 + `"}`, status: 400, kind: "invalid_request_error"},
	{name: "bad JSON", body: `{"input":`, status: 400, kind: "invalid_request_error"},
	{name: "tool_choice names an undeclared function", body: respBody(respTools+`,"tool_choice":{"type":"function","name":"write"},`, hiItem), status: 400, kind: "invalid_request_error", param: "tool_choice"},
	{name: "tool_choice names a declared function", body: respBody(respTools+`,"tool_choice":{"type":"function","name":"read"},`, hiItem), status: 200},
	{name: "tool_choice unknown mode", body: respBody(respTools+`,"tool_choice":"sometimes",`, hiItem), status: 400, kind: "invalid_request_error", param: "tool_choice"},
	{name: "function_call_output answers no call", body: respBody(respTools+",", hiItem+`,{"type":"function_call_output","call_id":"c9","output":"x"}`), status: 400, kind: "invalid_request_error", param: "input"},
	{name: "function_call left unanswered", body: respBody(respTools+",", hiItem+","+respCall+","+hiItem), status: 400, kind: "invalid_request_error", param: "input"},
	{name: "function_call answered", body: respBody(respTools+",", hiItem+","+respCall+`,{"type":"function_call_output","call_id":"c1","output":"x"}`), status: 200},
	{name: "unknown content part type", body: respBody("", `{"type":"message","role":"user","content":[{"type":"banana","text":"x"}]}`), status: 400, kind: "invalid_request_error", param: "input[0].content[0].type"},
	{name: "max_output_tokens below 16", body: respBody(`"max_output_tokens":15,`, hiItem), status: 400, kind: "invalid_request_error", param: "max_output_tokens", code: "integer_below_min_value"},
	{name: "max_output_tokens 0", body: respBody(`"max_output_tokens":0,`, hiItem), status: 400, kind: "invalid_request_error", param: "max_output_tokens", code: "integer_below_min_value"},
	{name: "max_output_tokens negative", body: respBody(`"max_output_tokens":-1,`, hiItem), status: 400, kind: "invalid_request_error", param: "max_output_tokens", code: "integer_below_min_value"},
	{name: "max_output_tokens 16", body: respBody(`"max_output_tokens":16,`, hiItem), status: 200},
	{name: "max_output_tokens past the context window", body: respBody(`"max_output_tokens":9223372036854775800,`, hiItem), status: 400, kind: "invalid_request_error", param: "max_output_tokens", code: "context_length_exceeded"},
	{name: "temperature above 2", body: respBody(`"temperature":3,`, hiItem), status: 400, kind: "invalid_request_error", param: "temperature"},
	{name: "top_p above 1", body: respBody(`"top_p":2,`, hiItem), status: 400, kind: "invalid_request_error", param: "top_p"},
	{name: "no input", body: `{"model":"gpt-x"}`, status: 400, kind: "invalid_request_error", param: "input"},
	{name: "unknown role", body: respBody("", `{"type":"message","role":"wizard","content":"x"}`), status: 400, kind: "invalid_request_error", param: "input[0].role"},
	{name: "previous_response_id", body: `{"model":"gpt-x","input":"hi","previous_response_id":"resp_1"}`, status: 400, kind: "invalid_request_error", param: "previous_response_id"},
	{name: "unknown item type is skipped", body: respBody("", hiItem+`,{"type":"banana"}`), status: 200},
}

// TestUpstreamValidation sends each API the requests of its table and checks
// the answer: the status, and an error in the API's own shape with the
// upstream error type, field and code. No rejected request reaches the
// scheduler.
func TestUpstreamValidation(t *testing.T) {
	m := newMesh(t, nil)
	for _, api := range []struct {
		name, path string
		cases      []upstreamCase
	}{
		{"chat", "/v1/chat/completions", chatCases},
		{"messages", "/v1/messages", messagesCases},
		{"responses", "/v1/responses", responsesCases},
	} {
		for _, tc := range api.cases {
			t.Run(api.name+"/"+tc.name, func(t *testing.T) {
				path := api.path
				if tc.path != "" {
					path = tc.path
				}
				m.sched.mu.Lock()
				routed := len(m.sched.routes)
				m.sched.mu.Unlock()
				resp := post(t, m.url+path, tc.body)
				body := readAll(t, resp.Body)
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
				}
				if tc.status == 200 {
					if path != "/v1/messages/count_tokens" {
						m.waitFinish(t)
					}
					return
				}
				checkErrorBody(t, api.name == "messages", body, tc)
				m.sched.mu.Lock()
				defer m.sched.mu.Unlock()
				if len(m.sched.routes) != routed {
					t.Fatal("a rejected request reached the scheduler")
				}
			})
		}
	}
}

// checkErrorBody checks an error body in OpenAI's shape, or Anthropic's.
func checkErrorBody(t *testing.T, anthropic bool, body string, tc upstreamCase) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string  `json:"type"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an error body: %s", body)
	}
	if e.Error.Type != tc.kind {
		t.Errorf("error type %q, want %q", e.Error.Type, tc.kind)
	}
	if anthropic {
		// Anthropic has no param or code: the message names the field.
		if e.Type != "error" || !strings.Contains(e.Error.Message, tc.param) {
			t.Errorf("not Anthropic's shape naming %q: %s", tc.param, body)
		}
		return
	}
	if e.Type != "" {
		t.Errorf("OpenAI errors have no top-level type: %s", body)
	}
	if got := deref(e.Error.Param); got != tc.param {
		t.Errorf("param %q, want %q", got, tc.param)
	}
	if got := deref(e.Error.Code); got != tc.code {
		t.Errorf("code %q, want %q", got, tc.code)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestBlockChecksOfReusedMessages: a session's next body reuses the
// messages its previous body decoded, and only the new ones are checked
// for unknown block types. That is sound only because a body that fails the
// check is not kept for reuse: a bad block stays a 400 however the session
// goes on.
func TestBlockChecksOfReusedMessages(t *testing.T) {
	send := sessionTurns(t, newMesh(t, nil), "/v1/messages", msgsBody, "x-dynamo-session-id", "blocks")
	turn1 := `{"role":"user","content":[{"type":"text","text":"Read hello.txt and tell me what it says, please."}]},{"role":"assistant","content":[{"type":"text","text":"It says hello."}]}`
	bad := `{"role":"user","content":[{"type":"banana"}]}`
	good := `{"role":"user","content":[{"type":"text","text":"Thanks."}]}`
	for i, tc := range []struct {
		msgs string
		want int
	}{
		{turn1, 200},
		{turn1 + "," + bad, 400}, // the new message is checked
		{turn1 + "," + bad + `,{"role":"assistant","content":"ok"},` + good, 400}, // the rejected body left nothing to reuse
		{turn1 + "," + good, 200}, // the good history still reuses turn 1
		{turn1 + "," + good + `,{"role":"assistant","content":"ok"},` + bad, 400}, // after a reuse, the new messages are checked
	} {
		if got := send(tc.msgs); got != tc.want {
			t.Fatalf("turn %d: status %d, want %d", i+1, got, tc.want)
		}
	}
}

// TestUTF8CheckOfReusedBodies: a session's next body is checked for UTF-8
// only past the part that repeats its previous one, and that part ends on a
// character of the previous body: a bad byte right where the bodies part,
// inside what was a two-byte character, is still found, and a rejected body
// leaves nothing to reuse.
func TestUTF8CheckOfReusedBodies(t *testing.T) {
	send := sessionTurns(t, newMesh(t, nil), "/v1/chat/completions", chatBody, "x-session-id", "utf8")
	turn1 := `{"role":"user","content":"Lis le fichier"},{"role":"assistant","content":"Il dit bonjour"}`
	for i, tc := range []struct {
		msgs string
		want int
	}{
		{turn1, 200},
		{turn1 + `,{"role":"user","content":"` + badUTF8 + `"}`, 400}, // in the new message
		{turn1 + `,{"role":"user","content":"été"}`, 200},
		// "é" is C3 A9: this body shares the C3 with the previous one, and
		// C3 28 is not UTF-8.
		{turn1 + `,{"role":"user","content":"` + "\xc3(" + `"}`, 400},
		{turn1 + `,{"role":"user","content":"été"},{"role":"assistant","content":"ok"},{"role":"user","content":"Merci."}`, 200},
	} {
		if got := send(tc.msgs); got != tc.want {
			t.Fatalf("turn %d: status %d, want %d", i+1, got, tc.want)
		}
	}
}

// sessionTurns sends one session's turns (named by header) to path, each
// body made of its messages by body, and answers each turn's status once
// the turn is done.
func sessionTurns(t *testing.T, m *mesh, path string, body func(extra, msgs string) string, header, session string) func(msgs string) int {
	return func(msgs string) int {
		t.Helper()
		resp := post(t, m.url+path, body("", msgs), header, session)
		readAll(t, resp.Body)
		if resp.StatusCode == 200 {
			m.waitFinish(t)
		}
		return resp.StatusCode
	}
}

// TestOversizeBodyAnswerIsReadable: a body over MaxBodyBytes gets a 413 in
// the API's shape with Connection: close that the client can read, both a
// client that reads while it sends (Go's) and one that sends its whole body
// before reading (as curl and most SDKs do), where net/http alone would
// reset the connection under the unread body.
func TestOversizeBodyAnswerIsReadable(t *testing.T) {
	const limit = 16 << 20
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.MaxBodyBytes = limit })
	// Past the limit by more than loopback's socket buffers take, so the
	// client is still sending when the 413 is written; under twice the
	// limit, so the frontend reads it to its end.
	big := chatBody("", `{"role":"user","content":"`+strings.Repeat("a", 2*limit-(1<<20))+`"}`)
	for _, tt := range []struct {
		path, kind string
		anthropic  bool
	}{
		{"/v1/chat/completions", "invalid_request_error", false},
		{"/v1/messages", "request_too_large", true},
	} {
		t.Run("go client"+tt.path, func(t *testing.T) {
			resp := post(t, m.url+tt.path, big)
			body := readAll(t, resp.Body)
			if resp.StatusCode != 413 || !resp.Close {
				t.Fatalf("status %d, close %v: %s", resp.StatusCode, resp.Close, body)
			}
			checkErrorBody(t, tt.anthropic, body, upstreamCase{kind: tt.kind})
		})
		t.Run("write then read"+tt.path, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(m.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: frontend\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tt.path, len(big))
			if _, err := io.WriteString(conn, req+big); err != nil {
				t.Fatalf("sending the body: %v", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			body := readAll(t, resp.Body)
			if resp.StatusCode != 413 || !resp.Close {
				t.Fatalf("status %d, close %v: %s", resp.StatusCode, resp.Close, body)
			}
			checkErrorBody(t, tt.anthropic, body, upstreamCase{kind: tt.kind})
		})
	}
}

// TestAnnouncedOversizeBodyRefusedUnread: a body whose Content-Length is
// over MaxBodyBytes gets its 413 at once, before a byte of it is read: a
// client that asked "Expect: 100-continue" is never told to send it (nor
// is the connection held open for a body that is not coming), and one that
// sends nothing more is not kept waiting for it.
func TestAnnouncedOversizeBodyRefusedUnread(t *testing.T) {
	const limit = 1 << 20
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.MaxBodyBytes = limit })
	for _, tt := range []struct {
		path, kind string
		anthropic  bool
	}{
		{"/v1/chat/completions", "invalid_request_error", false},
		{"/v1/messages", "request_too_large", true},
	} {
		for _, c := range []struct {
			name, expect string
			length       int64
		}{
			{"expect 100-continue", "Expect: 100-continue\r\n", 99999999999},
			{"expect 100-continue under twice the limit", "Expect: 100-continue\r\n", limit + limit/2},
			{"no body sent", "", 99999999999},
		} {
			t.Run(c.name+tt.path, func(t *testing.T) {
				conn, err := net.Dial("tcp", strings.TrimPrefix(m.url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: frontend\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", tt.path, c.expect, c.length)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("reading the answer: %v", err)
				}
				body := readAll(t, resp.Body)
				if resp.StatusCode != 413 || !resp.Close {
					t.Fatalf("status %d, close %v: %s", resp.StatusCode, resp.Close, body)
				}
				checkErrorBody(t, tt.anthropic, body, upstreamCase{kind: tt.kind})
				if c.expect != "" {
					if _, err := br.ReadByte(); err != io.EOF {
						t.Fatalf("after the 413: %v, want the connection closed", err)
					}
				}
			})
		}
	}
}

// A client without a valid key is refused for that before its body's size
// is judged: the 413's drain reads a body only for an admitted client.
func TestOversizeBodyOfAnUnkeyedClientIs401(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.MaxBodyBytes = 1000; c.APIKeys = map[string]string{"k-a": "acme"} })
	for _, key := range []string{"", "wrong"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(m.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: frontend\r\nx-api-key: %s\r\nContent-Type: application/json\r\nContent-Length: 1500\r\n\r\n%s", key, strings.Repeat("x", 1500))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("key %q and a body over the limit: %d, want 401", key, resp.StatusCode)
		}
	}
}

// FuzzRequestChecks: the checks that run after pkg/chat's decoders (its
// CheckedConversation) never panic on a body those decoders accept.
func FuzzRequestChecks(f *testing.F) {
	for _, cases := range [][]upstreamCase{chatCases, messagesCases, responsesCases} {
		for _, tc := range cases {
			f.Add([]byte(tc.body))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if r, _, err := chat.DecodeChatCompletion(body, nil); err == nil {
			r.CheckedConversation()
		}
		if r, _, err := chat.DecodeMessages(body, false, nil); err == nil {
			r.CheckedConversation(true)
		}
		if r, _, err := chat.DecodeResponses(body, nil); err == nil {
			r.CheckedConversation()
		}
	})
}
