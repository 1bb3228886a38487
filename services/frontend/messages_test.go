package frontend

import (
	"encoding/json"
	"strings"
	"testing"

	"switchyard.dev/pkg/chat"
)

const msgTools = `"tools":[{"name":"Read","description":"Read a file","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}},{"type":"web_search_20250305","name":"web_search"}]`

func msgBody(stream bool, cch string, extra string) string {
	s := "false"
	if stream {
		s = "true"
	}
	return `{"model":"claude-x","max_tokens":100,"stream":` + s + `,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.e12; cc_entrypoint=cli; cch=` + cch + `;"},{"type":"text","text":"You are Claude Code, a careful agent that reads files before answering questions about them."}],` + msgTools + `,"messages":[{"role":"user","content":[{"type":"text","text":"Read the file hello.txt, then say hi to everybody in this room please."}]},{"role":"system","content":"Reminder: be brief."}` + extra + `]}`
}

func TestMessagesStreamToolUseAndCachedTurn(t *testing.T) {
	m := toolMesh(t)
	resp := post(t, m.url+"/v1/messages?beta=true", msgBody(true, "aaaaa", ""), "X-Claude-Code-Session-Id", "cc-1", "anthropic-version", "2023-06-01")
	events, datas := sseEvents(t, resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get(workerHeader) != "worker-7" {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []string{"message_start", "ping", "content_block_start", "content_block_delta"}
	for i, w := range want {
		if events[i] != w {
			t.Fatalf("events %q", events)
		}
	}
	var text strings.Builder
	var toolName, toolInput, stop string
	for i, d := range datas {
		var ev struct {
			Type         string `json:"type"`
			Index        int    `json:"index"`
			ContentBlock struct {
				Type, Name, ID string
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage chat.AnthropicUsage `json:"usage"`
		}
		json.Unmarshal([]byte(d), &ev)
		if ev.Type != events[i] {
			t.Fatalf("event %q carries type %q", events[i], ev.Type)
		}
		switch ev.Type {
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				toolName = ev.ContentBlock.Name
				if ev.Index != 1 || !strings.HasPrefix(ev.ContentBlock.ID, "toolu_") {
					t.Fatalf("tool block %s", d)
				}
			}
		case "content_block_delta":
			text.WriteString(ev.Delta.Text)
			toolInput += ev.Delta.PartialJSON
		case "message_delta":
			stop = ev.Delta.StopReason
			if ev.Usage.OutputTokens == 0 || ev.Usage.InputTokens == 0 {
				t.Fatalf("usage %s", d)
			}
		}
	}
	if !strings.Contains(text.String(), "Hello there") || toolName != "Read" || toolInput != `{"file_path":""}` || stop != "tool_use" {
		t.Fatalf("text %q tool %q %q stop %q", text.String(), toolName, toolInput, stop)
	}
	m.waitFinish(t)
	// Turn 2: a new billing suffix, the tool result appended. The stripped
	// billing block keeps the prefix identical: a cache hit.
	extra := `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"hello.txt"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"hello from the probe file"}]}`
	resp = post(t, m.url+"/v1/messages", msgBody(false, "bbbbb", extra), "X-Claude-Code-Session-Id", "cc-1")
	var out chat.AnthropicResponse
	body := readAll(t, resp.Body)
	if err := json.Unmarshal([]byte(body), &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if out.Type != "message" || out.StopReason == nil || *out.StopReason != "end_turn" || len(out.Content) != 1 || out.Content[0].Type != "text" {
		t.Fatalf("answer %s", body)
	}
	if out.Usage.CacheReadInputTokens == 0 {
		t.Fatalf("no cache hit on turn 2: %s", body)
	}
	if tr := m.sched.lastRoute().GetAgent().GetInputTrigger().String(); tr != "INPUT_TRIGGER_TOOL_RESULT" {
		t.Fatalf("trigger %s", tr)
	}
}

func TestMessagesBillingHeaderStrippingConfigurable(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.KeepBillingHeader = true })
	for _, cch := range []string{"11111", "22222"} {
		resp := post(t, m.url+"/v1/messages", msgBody(false, cch, ""))
		var out chat.AnthropicResponse
		json.Unmarshal([]byte(readAll(t, resp.Body)), &out)
		// Only the block(s) before the varying suffix can match.
		if out.Usage.CacheReadInputTokens > 32 || out.Usage.InputTokens < 100 {
			t.Fatalf("with the billing header kept, the varying suffix must miss the cache: %+v", out.Usage)
		}
		m.waitFinish(t)
	}
}

func TestCountTokensAndMessagesErrors(t *testing.T) {
	m := newMesh(t, nil)
	resp := post(t, m.url+"/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	json.Unmarshal([]byte(readAll(t, resp.Body)), &ct)
	if resp.StatusCode != 200 || ct.InputTokens < 5 {
		t.Fatalf("count_tokens %d %d", resp.StatusCode, ct.InputTokens)
	}
	for _, tt := range []struct {
		body, hdr string
		status    int
	}{
		{body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`, status: 400},                                               // no max_tokens
		{body: `{"model":"m","max_tokens":5,"messages":[]}`, status: 400},                                                             // no messages
		{body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, hdr: strings.Repeat("s", 300), status: 400}, // bad session
	} {
		var resp = post(t, m.url+"/v1/messages", tt.body, "x-claude-code-session-id", tt.hdr)
		if tt.hdr == "" {
			resp = post(t, m.url+"/v1/messages", tt.body)
		}
		body := readAll(t, resp.Body)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != tt.status || e.Type != "error" || e.Error.Type != "invalid_request_error" {
			t.Errorf("%q: %d %s", tt.body, resp.StatusCode, body)
		}
		// The field is named once ("messages: ..."), not twice.
		if field, _, _ := strings.Cut(e.Error.Message, ":"); strings.Count(e.Error.Message, field) != 1 {
			t.Errorf("field named twice: %q", e.Error.Message)
		}
	}
}

func TestBodyIdentityFallback(t *testing.T) {
	m := newMesh(t, nil)
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/messages", `{"model":"m","max_tokens":5,"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"cc-old\"}"},"messages":[{"role":"user","content":"hi"}]}`, "cc-old"},
		{"/v1/responses", `{"model":"m","input":"hi","prompt_cache_key":"th-key"}`, "th-key"},
		{"/v1/chat/completions", `{"model":"m","prompt_cache_key":"pk","messages":[{"role":"user","content":"hi"}]}`, "pk"},
		{"/v1/messages", `{"model":"m","max_tokens":5,"metadata":{"user_id":7},"messages":[{"role":"user","content":"hi"}]}`, ""},
	} {
		resp := post(t, m.url+tc.path, tc.body)
		if b := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tc.path, resp.StatusCode, b)
		}
		m.waitFinish(t)
		a := m.sched.lastRoute().GetAgent()
		if a.GetSessionId() != tc.want || (tc.want != "" && a.GetHarness() != "body") {
			t.Errorf("%s: agent %v, want session %q", tc.path, a, tc.want)
		}
	}
}
