package chat

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitThinking(t *testing.T) {
	for _, tc := range []struct{ in, reasoning, content string }{
		{"<think>\nLet me check.\n</think>\n\nThe answer is 4.", "Let me check.", "The answer is 4."},
		{"<think>\n\n</think>\n\nHi", "", "Hi"},
		{"<think>\na\n\nb\n</think>\n\n<tool_call>\n{}\n</tool_call>", "a\n\nb", "<tool_call>\n{}\n</tool_call>"},
		{"Plain answer <think>not reasoning</think>", "", "Plain answer <think>not reasoning</think>"},
		{"<thin", "", "<thin"},
		{"<think>\nunfinished thought\n", "unfinished thought", ""},
		{"<think>x</think>", "x", ""},
		{"", "", ""},
		{"\n<think>x</think>y", "", "\n<think>x</think>y"},
		{"<think>a </thinker> b</think>c", "a </thinker> b", "c"},
	} {
		r, c := SplitThinking(tc.in)
		if r != tc.reasoning || c != tc.content {
			t.Errorf("%q: got (%q, %q), want (%q, %q)", tc.in, r, c, tc.reasoning, tc.content)
		}
	}
}

// Any chunking of the stream gives the whole-text result, and no piece is
// empty.
func FuzzThinkSplitterChunks(f *testing.F) {
	f.Add("<think>\nLet me check.\n</think>\n\nThe answer is 4.", uint8(1))
	f.Add("<think>\na\n\n</thi\nnk></think>\n\n\nrest", uint8(3))
	f.Add("no thinking", uint8(2))
	f.Fuzz(func(t *testing.T, text string, step uint8) {
		if !utf8.ValidString(text) {
			return
		}
		n := int(step%7) + 1
		wantR, wantC := SplitThinking(text)
		s := NewThinkSplitter()
		var r, c strings.Builder
		collect := func(parts []ThinkPart) {
			for _, p := range parts {
				if p.Text == "" {
					t.Fatalf("empty part from %q", text)
				}
				if p.Reasoning {
					if c.Len() > 0 {
						t.Fatalf("reasoning after content in %q", text)
					}
					r.WriteString(p.Text)
				} else {
					c.WriteString(p.Text)
				}
			}
		}
		for i := 0; i < len(text); i += n {
			collect(s.Feed(text[i:min(i+n, len(text))]))
		}
		collect(s.Flush())
		if r.String() != wantR || c.String() != wantC {
			t.Fatalf("%q in chunks of %d: got (%q, %q), want (%q, %q)", text, n, r.String(), c.String(), wantR, wantC)
		}
	})
}
