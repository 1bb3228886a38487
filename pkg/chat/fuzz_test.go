package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func FuzzDecodeMessages(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":10,"stream":true,"system":[{"type":"text","text":"x-anthropic-billing-header: cc=1;"},{"type":"text","text":"S"}],"tools":[{"name":"Read","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"system","content":"r"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Read","input":{}}]}]}`))
	f.Add([]byte(`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"r"}]},{"type":"image"}]}],"system":"s"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _, err := DecodeMessages(body, true, nil)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		r.Trigger()
		c, err := r.Conversation(true)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		checked, err := r.CheckedConversation(true)
		checkedOrRejected(t, c, checked, err)
		ChatML{}.Render(c, true)
	})
}

func FuzzDecodeResponses(f *testing.F) {
	f.Add([]byte(`{"input":"hi","tools":[{"type":"namespace","tools":[{"type":"custom","name":"x"}]}]}`))
	f.Add([]byte(`{"input":[{"type":"additional_tools","tools":[{"type":"function","name":"f"}]},{"role":"developer","content":"d"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","output":[{"type":"input_text","text":"r"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _, err := DecodeResponses(body, nil)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		r.Trigger()
		c, _, err := r.Conversation()
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		checked, _, err := r.CheckedConversation()
		checkedOrRejected(t, c, checked, err)
		ChatML{}.Render(c, true)
	})
}

// checkedOrRejected: CheckedConversation gives a body's Conversation c, or
// rejects the body with a *RequestError.
func checkedOrRejected(t *testing.T, c, checked *Conversation, err error) {
	t.Helper()
	if err != nil {
		if _, ok := err.(*RequestError); !ok {
			t.Fatalf("untyped error %v", err)
		}
		return
	}
	if !cmp.Equal(c, checked, cmp.AllowUnexported(Conversation{})) {
		t.Fatalf("CheckedConversation %+v, Conversation %+v", checked, c)
	}
}

// jsonString is json.Unmarshal into a string, only faster.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\nb\t\"q\"\\ \/ \u00e9 \ud83d\ude00 \ud800 x \udc00\ud800"`, `"\u0041\b\f\r"`, "\"caf\xe9\"", `"\uZZZZ"`, `"ab\"`, `"日本語 ✅"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want string
		wantErr := json.Unmarshal(raw, &want)
		if wantErr != nil || !json.Valid(raw) {
			return // callers pass only literals a decoder has validated
		}
		got, err := jsonString(raw)
		if err != nil || got != want {
			t.Fatalf("%q: got %q, %v; want %q", raw, got, err, want)
		}
	})
}

// guard takes every "<|" out of a conversation's string and unguard gives
// the string back (JinjaTemplate).
func FuzzJinjaGuard(f *testing.F) {
	for _, s := range []string{"<|im_end|>", "<<||", "\uFDD0<|", "<\uFDD0|", "\uFDD0\uFDD0\uFDD0", "plain"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g := guard(s)
		if strings.Contains(g, "<|") || unguard(g) != s {
			t.Fatalf("%q: guarded %q, back %q", s, g, unguard(g))
		}
	})
}

// HermesParser gives the same outputs, joined, however the generation is
// cut into feeds (a token can end anywhere in a tag); with no call among
// them, the content is the text as generated, nothing added or dropped.
func FuzzHermesParserSplits(f *testing.F) {
	f.Add("a<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"</tool_cal\"}}\n</tool_call>b<tool_call>oops</tool_call><tool", uint8(3))
	f.Add("<tool_call>{\"name\":\"f\",\"arguments\":\"{}\"}</tool_call></tool_call><tool_call>", uint8(1))
	f.Add("<tool_call>\n{\"name\":\"", uint8(2)) // cut short by max_tokens
	f.Fuzz(func(t *testing.T, text string, step uint8) {
		p := NewHermesParser()
		var outs []Output
		for i, n := 0, max(1, int(step%16)); i < len(text); n = max(1, (n*7+int(step))%16) {
			outs = append(outs, p.Feed(text[i:min(i+n, len(text))])...)
			i += n
		}
		whole := NewHermesParser()
		want := joinOutputs(append(whole.Feed(text), whole.Flush()...))
		if got := joinOutputs(append(outs, p.Flush()...)); got != want {
			t.Fatalf("%q in feeds of %d: %s, whole %s", text, step, got, want)
		}
		if !strings.Contains(want, "[call ") && want != text {
			t.Fatalf("%q with no call parsed is content %q", text, want)
		}
	})
}

// joinOutputs is outputs as one string: contents joined (how they were cut
// does not matter), calls spelled out.
func joinOutputs(outs []Output) string {
	var b strings.Builder
	for _, o := range outs {
		if o.ToolCall != nil {
			fmt.Fprintf(&b, "[call %q %q]", o.ToolCall.Name, o.ToolCall.Arguments)
		}
		b.WriteString(o.Content)
	}
	return b.String()
}
