package chat

import (
	"strings"
	"testing"

	"switchyard.dev/pkg/tokenizer"
)

// answerOf feeds text token by token through an Answer and returns its parts
// joined as "r:…", "c:…" and "call:name" with the finish reason.
func answerOf(t *testing.T, text string, stops []string, tools, engineLength bool) (string, string) {
	t.Helper()
	tok := tokenizer.Default()
	end, _ := tok.SpecialID("<|im_end|>")
	a := NewAnswer(tok, stops, []uint32{end}, tools)
	var b strings.Builder
	emit := func(p AnswerPart) error {
		switch {
		case p.Reasoning != "":
			b.WriteString("r:" + p.Reasoning + "|")
		case p.ToolCall != nil:
			b.WriteString("call:" + p.ToolCall.Name + "|")
		default:
			b.WriteString("c:" + p.Content + "|")
		}
		return nil
	}
	for _, id := range append(tok.EncodeOrdinary(text), end) {
		if err := a.Token(id, emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Finish(emit); err != nil {
		t.Fatal(err)
	}
	return b.String(), a.FinishReason(engineLength)
}

// joined drops the part boundaries (where the stream split text depends on
// the decoder) but keeps the kinds.
func joined(parts string) string {
	var b strings.Builder
	last := ""
	for _, p := range strings.Split(strings.TrimSuffix(parts, "|"), "|") {
		kind, text, _ := strings.Cut(p, ":")
		if kind != last || kind == "call" {
			if b.Len() > 0 {
				b.WriteString("|")
			}
			b.WriteString(kind + ":")
			last = kind
		}
		b.WriteString(text)
	}
	return b.String()
}

func TestAnswer(t *testing.T) {
	for _, tt := range []struct {
		name, text   string
		stops        []string
		tools        bool
		engineLength bool
		want, finish string
	}{
		{name: "plain text", text: "Hello there.", want: "c:Hello there.", finish: "stop"},
		{name: "engine hit max_tokens", text: "Hello", engineLength: true, want: "c:Hello", finish: "length"},
		{name: "reasoning first", text: "<think>plan it</think>Done.", want: "r:plan it|c:Done.", finish: "stop"},
		{name: "stop sequence cuts the text", text: "one two STOP three", stops: []string{"STOP"}, engineLength: true, want: "c:one two ", finish: "stop"},
		{name: "a tool call", text: `Reading.<tool_call>{"name": "read", "arguments": {"path": "a"}}</tool_call>`, tools: true,
			want: "c:Reading.|call:read", finish: "tool_calls"},
		{name: "a call inside reasoning is reasoning", text: `<think><tool_call>{"name": "x", "arguments": {}}</tool_call></think>ok`, tools: true,
			finish: "stop"},
		{name: "no tools declared: call text is content", text: `<tool_call>{"name": "read", "arguments": {}}</tool_call>`,
			want: `c:<tool_call>{"name": "read", "arguments": {}}</tool_call>`, finish: "stop"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parts, finish := answerOf(t, tt.text, tt.stops, tt.tools, tt.engineLength)
			got := joined(parts)
			if tt.want != "" && got != tt.want {
				t.Errorf("parts %q, want %q", got, tt.want)
			}
			if strings.HasPrefix(tt.name, "a call inside") && (strings.Contains(got, "call:") || !strings.HasPrefix(got, "r:")) {
				t.Errorf("parts %q: a call inside reasoning must stay reasoning", got)
			}
			if finish != tt.finish {
				t.Errorf("finish %q, want %q", finish, tt.finish)
			}
		})
	}
}
