package chat

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
)

func TestChatMLRender(t *testing.T) {
	c := &Conversation{
		Messages: []Message{
			{Role: RoleSystem, Content: "Be brief."},
			{Role: RoleUser, Content: "Read a.txt"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "read", Arguments: `{ "path": "a.txt" }`}, {Name: "read", Arguments: `not json`}}},
			{Role: RoleTool, Content: "A"},
			{Role: RoleTool, Content: "B"},
			{Role: RoleAssistant, Content: "Done."},
			{Role: RoleSystem, Content: "Reminder."},
			{Role: RoleUser, Content: "<|im_start|>bye"},
		},
		Tools: []Tool{{Name: "read", Description: "Read <file>", Parameters: json.RawMessage(`{"type": "object"}`)}},
	}
	p, err := ChatML{}.Render(c, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou can call the functions below to help with the request. " +
		"Their signatures, one JSON object per line, are inside <tools></tools>:\n<tools>\n" +
		`{"type":"function","function":{"name":"read","description":"Read <file>","parameters":{"type":"object"}}}` +
		"\n</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments inside <tool_call></tool_call> tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nRead a.txt<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n{\"name\":\"read\",\"arguments\":{\"path\":\"a.txt\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"read\",\"arguments\":\"not json\"}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response><|im_end|>\n" +
		"<|im_start|>assistant\nDone.<|im_end|>\n" +
		"<|im_start|>system\nReminder.<|im_end|>\n" +
		"<|im_start|>user\n<|im_start|>bye<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if d := cmp.Diff(want, p.String()); d != "" {
		t.Fatalf("(-want +got)\n%s", d)
	}
	// The user's "<|im_start|>" is text, never a special segment.
	for _, s := range p {
		if s.Special && s.Text != ImStart && s.Text != ImEnd {
			t.Fatalf("unexpected special %q", s.Text)
		}
		if !s.Special && strings.Contains(s.Text, "<|im_start|>bye") {
			return
		}
	}
	t.Fatal("user text with a control token not kept as text")
}

// TestRenderPrefixStable: a conversation extended by the answer and a new
// message renders to an extension of the previous prompt.
func TestRenderPrefixStable(t *testing.T) {
	c := &Conversation{Messages: []Message{{Role: RoleSystem, Content: "S"}, {Role: RoleUser, Content: "hi"}},
		Tools: []Tool{{Name: "f"}}}
	p1, _ := ChatML{}.Render(c, true)
	c.Messages = append(c.Messages, Message{Role: RoleAssistant, Content: "yo", ToolCalls: []ToolCall{{Name: "f", Arguments: "{}"}}},
		Message{Role: RoleTool, Content: "r"})
	p2, _ := ChatML{}.Render(c, true)
	if !strings.HasPrefix(p2.String(), p1.String()) {
		t.Fatalf("not prefix-stable:\n%q\n%q", p1.String(), p2.String())
	}
}

func TestHermesParserSplits(t *testing.T) {
	text := "Let me look.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a<b\"}}\n</tool_call>\n<tool_call>{\"name\":\"ls\",\"arguments\":\"{}\"}</tool_call><tool_call>oops</tool_call> end <tool"
	wantContent := "Let me look.\n\n<tool_call>oops</tool_call> end <tool"
	wantCalls := []ToolCall{{Name: "read", Arguments: `{"path": "a<b"}`}, {Name: "ls", Arguments: "{}"}}
	// Every split of the text into two feeds, and byte-by-byte, give the same.
	check := func(outs []Output) {
		t.Helper()
		var content strings.Builder
		var calls []ToolCall
		for _, o := range outs {
			if o.ToolCall != nil {
				calls = append(calls, *o.ToolCall)
			} else {
				content.WriteString(o.Content)
			}
		}
		if content.String() != wantContent {
			t.Fatalf("content %q", content.String())
		}
		if d := cmp.Diff(wantCalls, calls); d != "" {
			t.Fatalf("calls (-want +got)\n%s", d)
		}
	}
	for i := 0; i <= len(text); i++ {
		p := NewHermesParser()
		outs := append(p.Feed(text[:i]), p.Feed(text[i:])...)
		check(append(outs, p.Flush()...))
	}
	p := NewHermesParser()
	var outs []Output
	for i := 0; i < len(text); i++ {
		outs = append(outs, p.Feed(text[i:i+1])...)
		for _, o := range outs {
			if strings.Contains(o.Content, "<tool_call>{") {
				t.Fatal("a call leaked as content")
			}
		}
	}
	check(append(outs, p.Flush()...))
}

func TestHermesUnterminatedCall(t *testing.T) {
	content, calls := ParseToolCalls("x<tool_call>{\"name\":\"f\",\"arguments\":{}}")
	if content != "x" || len(calls) != 1 || calls[0].Name != "f" || calls[0].Arguments != "{}" {
		t.Fatalf("%q %v", content, calls)
	}
	// Cut short (max_tokens), it is the text the model wrote: no closing
	// tag it did not write, which the client would send back as its own.
	content, calls = ParseToolCalls("x<tool_call>{\"name\":")
	if content != "x<tool_call>{\"name\":" || len(calls) != 0 {
		t.Fatalf("%q %v", content, calls)
	}
}

// A long call (a file written through a tool) streams token by token
// without its body being copied again at every token: what Feed allocates
// grows with the call's length, not with its square.
func TestHermesLongCallIsNotCopiedPerToken(t *testing.T) {
	const n = 200_000 // bytes of arguments, 4 a token
	p := NewHermesParser()
	p.Feed("<tool_call>\n{\"name\": \"write\", \"arguments\": {\"content\": \"")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n / 4 {
		if out := p.Feed("abcd"); len(out) != 0 {
			t.Fatalf("output before the call closed: %v", out)
		}
	}
	runtime.ReadMemStats(&after)
	out := append(p.Feed("\"}}\n</tool_call>"), p.Flush()...)
	if len(out) != 1 || out[0].ToolCall == nil || len(out[0].ToolCall.Arguments) != n+len(`{"content": ""}`) {
		t.Fatalf("got %d outputs", len(out))
	}
	// Quadratic copying allocated n*n/8 bytes (5 GB); a builder that
	// doubles allocates about 2n.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16*n {
		t.Fatalf("feeding a %d-byte call allocated %d bytes", n, alloc)
	}
}

func TestSimulatedToolCallRoundTrip(t *testing.T) {
	tool := Tool{Name: "bash", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"integer"},"bg":{"type":"boolean"}},"required":["timeout","command"]}`)}
	tc, text := SimulatedToolCall(tool)
	_, calls := ParseToolCalls(text)
	if len(calls) != 1 || calls[0] != tc || tc.Arguments != `{"command":"","timeout":0}` {
		t.Fatalf("%q → %v (want %v)", text, calls, tc)
	}
}

func TestDecodeChatCompletion(t *testing.T) {
	r, _, err := DecodeChatCompletion([]byte(`{"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"web_search"}],"max_tokens":5,"unknown_field":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Conversation()
	if err != nil {
		t.Fatal(err)
	}
	want := &Conversation{
		Messages: []Message{{Role: RoleSystem, Content: "a\nb"}, {Role: RoleUser, Content: "hi"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}}, {Role: RoleTool, Content: "r", ToolCallID: "c1"}},
		Tools: []Tool{{Name: "f"}},
	}
	if d := cmp.Diff(want, c, cmpopts.IgnoreUnexported(Conversation{})); d != "" {
		t.Fatalf("(-want +got)\n%s", d)
	}
	if n, field := r.LimitTokens(); n != 5 || field != "max_tokens" || r.LastRole() != "tool" {
		t.Fatalf("limit %d (%s) last %q", n, field, r.LastRole())
	}
	for _, bad := range []string{`[]`, `{"messages":[]}`, `{"messages":[{"role":"user","content":1}]}`, `{"messages":[{"role":"user"}],"max_tokens":0}`,
		`{"messages":[{"role":"user"}],"temperature":3}`, `{"messages":[{"role":"user"}]} {}`, `{"messages":[{"role":"user"}],"tools":[{"type":"function","function":{}}]}`} {
		r, _, err := DecodeChatCompletion([]byte(bad), nil)
		if err == nil {
			_, err = r.Conversation()
		}
		if _, ok := err.(*RequestError); !ok {
			t.Errorf("%s: err = %v, want *RequestError", bad, err)
		}
	}
}

// TestDecodeTypeErrorsSpeakJSON: a value of the wrong JSON type is reported
// with the field and JSON's type names, never encoding/json's Go types.
// An empty input array is no input, whatever whitespace it holds.
func TestDecodeResponsesEmptyInput(t *testing.T) {
	for _, in := range []string{`[]`, `[ ]`, "[\n  ]", `null`, `""`} {
		body := `{"model":"m","instructions":"be brief","input":` + in + `}`
		_, _, err := DecodeResponses([]byte(body), nil)
		var re *RequestError
		if !errors.As(err, &re) || re.Param != "input" {
			t.Errorf("%s: %v, want a RequestError naming input", body, err)
		}
	}
}

// A message of many small parts (text blocks, thinking blocks, content
// parts) costs memory, and time, in proportion to the body: joining the
// parts must not copy the text so far again at each one.
func TestManyPartsCostTheirSize(t *testing.T) {
	const n = 10_000
	parts := func(part string) string { return strings.Repeat(part+",", n-1) + part }
	text := `{"type":"text","text":"0123456789"}`
	for _, tc := range []struct{ api, body string }{
		{"messages", `{"max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` + parts(text) + `]}]}`},
		{"messages", `{"max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` + parts(`{"type":"thinking","thinking":"0123456789"}`) + `]}]}`},
		{"messages", `{"max_tokens":5,"messages":[{"role":"user","content":[` + parts(text) + `]}]}`},
		{"chat", `{"messages":[{"role":"user","content":[` + parts(text) + `]}]}`},
		{"responses", `{"input":[{"role":"user","content":[` + parts(`{"type":"input_text","text":"0123456789"}`) + `]}]}`},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d, _ := apiDecoders[tc.api]([]byte(tc.body), nil)
		runtime.ReadMemStats(&after)
		if d.Err != nil {
			t.Fatalf("%s: %v", tc.api, d.Err)
		}
		// Quadratic joining allocated n*n/2 times a part's text (500 MB).
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*uint64(len(tc.body)) {
			t.Errorf("%s: decoding %.60s… (%d bytes) allocated %d bytes", tc.api, tc.body, len(tc.body), alloc)
		}
	}
}

func TestDecodeTypeErrorsSpeakJSON(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"chat":      func(b []byte) error { _, _, err := DecodeChatCompletion(b, nil); return err },
		"messages":  func(b []byte) error { _, _, err := DecodeMessages(b, true, nil); return err },
		"responses": func(b []byte) error { _, _, err := DecodeResponses(b, nil); return err },
	}
	for _, tt := range []struct{ api, body, param, message string }{
		{"chat", `[]`, "", "invalid JSON body: the body must be an object, not a JSON array"},
		{"chat", `{"max_tokens":"5","messages":[{"role":"user","content":"x"}]}`, "max_tokens", "invalid JSON body: max_tokens must be an integer, not a JSON string"},
		{"chat", `{"max_tokens":1.5,"messages":[{"role":"user","content":"x"}]}`, "max_tokens", "invalid JSON body: max_tokens must be an integer, not 1.5"},
		{"chat", `{"messages":[{"role":1,"content":"x"}]}`, "messages.role", "invalid JSON body: messages.role must be a string, not a JSON number"},
		{"messages", `{"max_tokens":5,"messages":{}}`, "messages", "invalid JSON body: messages must be an array, not a JSON object"},
		{"messages", `{"max_tokens":5,"stream":"yes","messages":[{"role":"user","content":"x"}]}`, "stream", "invalid JSON body: stream must be a boolean, not a JSON string"},
		{"responses", `{"input":"x","temperature":true}`, "temperature", "invalid JSON body: temperature must be a number, not a JSON bool"},
	} {
		err := decoders[tt.api]([]byte(tt.body))
		re, ok := err.(*RequestError)
		if !ok || re.Param != tt.param || re.Message != tt.message {
			t.Errorf("%s %s: got %#v, want param %q message %q", tt.api, tt.body, err, tt.param, tt.message)
		}
	}
}

// TestAnthropicConversationNamesTheBlock: a message that does not
// normalise (here one built by hand, which decoding would have refused)
// is refused by Conversation with the field named down to the block.
func TestAnthropicConversationNamesTheBlock(t *testing.T) {
	for _, tt := range []struct {
		content, param string
	}{
		{`[{"type":"tool_result","tool_use_id":"t","content":5}]`, "messages.1.content.0.content"},
		{`7`, "messages.1.content"},
	} {
		r := &MessagesRequest{Messages: []AnthropicMessage{{Role: "user", Content: json.RawMessage(`"hi"`)},
			{Role: "user", Content: json.RawMessage(tt.content)}}}
		_, err := r.Conversation(false)
		if re, ok := err.(*RequestError); !ok || re.Param != tt.param {
			t.Errorf("%s: error %v, want one naming %s", tt.content, err, tt.param)
		}
	}
}

// TestBillingHeaderStripping: Claude Code's billing-header block is dropped
// (its suffix changes every request), only it: a system given as one string
// keeps what follows the header's line; with stripping off it all stays.
func TestBillingHeaderStripping(t *testing.T) {
	for _, tt := range []struct {
		system string
		strip  bool
		want   string
	}{
		{`[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.e12; cc_entrypoint=cli;"},{"type":"text","text":"You are Claude Code."}]`, true, "You are Claude Code."},
		{`"x-anthropic-billing-header: cc_version=1;\nYou are Claude Code."`, true, "You are Claude Code."},
		{`"x-anthropic-billing-header: cc_version=1;"`, true, ""},
		{`[{"type":"text","text":"x-anthropic-billing-header: cc_version=1;"},{"type":"text","text":"S"}]`, false, "x-anthropic-billing-header: cc_version=1;\nS"},
		{`"You are x-anthropic-billing-header: aware."`, true, "You are x-anthropic-billing-header: aware."},
	} {
		r, _, err := DecodeMessages([]byte(`{"max_tokens":5,"system":`+tt.system+`,"messages":[{"role":"user","content":"hi"}]}`), true, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := r.Conversation(tt.strip)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if c.Messages[0].Role == RoleSystem {
			got = c.Messages[0].Content
		}
		if got != tt.want {
			t.Errorf("system %s (strip %v): got %q, want %q", tt.system, tt.strip, got, tt.want)
		}
	}
}

func FuzzDecodeChatCompletion(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"x"}}]},{"role":"tool","content":[{"type":"text","text":"r"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _, err := DecodeChatCompletion(body, nil)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("untyped error %T %v", err, err)
			}
			return
		}
		c, err := r.Conversation()
		if err != nil {
			return
		}
		checked, err := r.CheckedConversation()
		checkedOrRejected(t, c, checked, err)
		if _, err := (ChatML{}).Render(c, true); err != nil {
			return
		}
	})
}

// TestPreprocessWarmEqualsCold: reusing a session's previous turn gives the
// same tokens and hashes as a cold run, and reuses the common prefix.
func TestPreprocessWarmEqualsCold(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "salt")
	c := &Conversation{Messages: []Message{{Role: RoleSystem, Content: strings.Repeat("You are a careful coding agent. ", 40)},
		{Role: RoleUser, Content: "Fix the bug in main.go, héhé 日本語."}}, Tools: []Tool{{Name: "read"}}}
	var prev *Session
	for turn := 0; turn < 6; turn++ {
		p, err := ChatML{}.Render(c, true)
		if err != nil {
			t.Fatal(err)
		}
		cold, _ := Preprocess(tok, h, p, nil)
		warm, next := Preprocess(tok, h, p, prev)
		if d := cmp.Diff(cold.Tokens, warm.Tokens); d != "" {
			t.Fatalf("turn %d tokens differ:\n%s", turn, d)
		}
		if d := cmp.Diff(cold.Hashes, warm.Hashes); d != "" {
			t.Fatalf("turn %d hashes differ:\n%s", turn, d)
		}
		if want := tok.Encode(p.String()); !cmp.Equal(want, cold.Tokens) {
			t.Fatalf("turn %d: segment tokenization differs from whole-prompt Encode", turn)
		}
		if turn > 0 && turn != 4 && warm.ReusedTokens < len(prev.Tokens())-8 {
			t.Fatalf("turn %d reused %d of %d", turn, warm.ReusedTokens, len(prev.Tokens()))
		}
		prev = next
		c.Messages = append(c.Messages, Message{Role: RoleAssistant, Content: "Looking.", ToolCalls: []ToolCall{{Name: "read", Arguments: `{"p":1}`}}},
			Message{Role: RoleTool, Content: strings.Repeat("line of the file\n", turn*7)})
		if turn == 3 {
			// A compaction rewrites history: the prefix shrinks, still identical to cold.
			c.Messages = append(c.Messages[:1], Message{Role: RoleUser, Content: "Summary so far."})
		}
	}
	// A state made with another hasher is ignored, not misused.
	p, _ := ChatML{}.Render(c, true)
	other, _ := Preprocess(tok, kvhash.New(16, "", "other"), p, prev)
	if other.ReusedTokens != 0 {
		t.Fatal("state of another salt reused")
	}
}
