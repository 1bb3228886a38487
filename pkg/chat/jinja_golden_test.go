package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"switchyard.dev/pkg/tokenizer"
)

// goldenCase is one entry of testdata/qwen3_template_cases.json.
type goldenCase struct {
	Name                string          `json:"name"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Request             json.RawMessage `json:"request"`
	// Anthropic, if set, is the same conversation as an Anthropic Messages
	// body (Claude Code's shape); it must render to the same golden.
	Anthropic json.RawMessage `json:"anthropic"`
}

// TestJinjaQwen3Golden renders the real Qwen3 chat template through the
// gateway's path (Chat Completions body -> Conversation -> JinjaTemplate) and
// requires the bytes Python jinja2 produces with transformers' settings and
// vLLM's message normalisation (testdata/gen_qwen3_golden.py wrote them).
func TestJinjaQwen3Golden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "qwen3_template_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	jt, err := NewJinjaTemplate(tokenizer.DefaultChatTemplate(), isQwenSpecial, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", "qwen3_golden", tc.Name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			// render renders the conversation of a body, what, and holds it to
			// the golden.
			render := func(what string, conv *Conversation, err error) Prompt {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				p, err := jt.Render(conv, tc.AddGenerationPrompt)
				if err != nil {
					t.Fatal(err)
				}
				if got := p.String(); got != string(want) {
					t.Fatalf("%s differs from Python jinja2 at byte %d\n got: %q\nwant: %q", what, firstDiff(got, string(want)), got, want)
				}
				return p
			}
			req, _, err := DecodeChatCompletion(tc.Request, nil)
			if err != nil {
				t.Fatal(err)
			}
			conv, err := req.Conversation()
			p := render("Chat Completions body", conv, err)
			if len(tc.Anthropic) > 0 {
				areq, _, err := DecodeMessages(tc.Anthropic, true, nil)
				if err != nil {
					t.Fatal(err)
				}
				aconv, err := areq.Conversation(true)
				render("Anthropic body", aconv, err)
			}
			// Special tokens are cut out as the engine's tokenizer would.
			for _, seg := range p {
				if !seg.Special && strings.Contains(seg.Text, ImStart) {
					t.Fatalf("text segment holds %s: %q", ImStart, seg.Text)
				}
			}
		})
	}
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
