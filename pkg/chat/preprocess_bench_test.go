package chat

import (
	"fmt"
	"strings"
	"testing"

	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
)

// agentConversation builds an agent-shaped conversation of about n tokens:
// a long system prompt and tool list, then rounds of tool call + tool output.
func agentConversation(tokens int) *Conversation {
	c := &Conversation{
		Messages: []Message{{Role: RoleSystem, Content: strings.Repeat("You are a coding agent. Read files before you edit them, run the tests, and keep answers short. ", 60)},
			{Role: RoleUser, Content: "Fix the failing test in pkg/routing and explain the cause."}},
		Tools: []Tool{{Name: "read", Description: "Read a file from the repository.", Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
			{Name: "bash", Description: "Run a shell command.", Parameters: []byte(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)}},
	}
	for i := 0; ; i++ {
		p, _ := ChatML{}.Render(c, true)
		if len(p.String())/3 >= tokens { // about 3 bytes a token (measured: 2.96)
			return c
		}
		c.Messages = append(c.Messages,
			Message{Role: RoleAssistant, Content: "Let me look at the next file.", ToolCalls: []ToolCall{{Name: "read", Arguments: fmt.Sprintf(`{"path":"pkg/routing/file%d.go"}`, i)}}},
			Message{Role: RoleTool, Content: toolOutput(i)})
	}
}

// BenchmarkPreprocess measures one agent turn's tokenization and block
// hashing, cold (no session state) and warm (the previous turn's state, the
// new turn adding a tool call and its output).
func BenchmarkPreprocess(b *testing.B) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	for _, size := range []int{10_000, 100_000} {
		c := agentConversation(size)
		prevPrompt, _ := ChatML{}.Render(&Conversation{Messages: c.Messages[:len(c.Messages)-2], Tools: c.Tools}, true)
		prompt, _ := ChatML{}.Render(c, true)
		cold, _ := Preprocess(tok, h, prompt, nil)
		b.Run(fmt.Sprintf("cold/%dk", size/1000), func(b *testing.B) {
			b.SetBytes(int64(len(prompt.String())))
			for b.Loop() {
				Preprocess(tok, h, prompt, nil)
			}
			b.ReportMetric(float64(len(cold.Tokens))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
		_, prev := Preprocess(tok, h, prevPrompt, nil)
		b.Run(fmt.Sprintf("warm/%dk", size/1000), func(b *testing.B) {
			b.SetBytes(int64(len(prompt.String())))
			for b.Loop() {
				Preprocess(tok, h, prompt, prev)
			}
			b.ReportMetric(float64(len(cold.Tokens)), "prompt-tokens")
		})
		b.Run(fmt.Sprintf("render/%dk", size/1000), func(b *testing.B) {
			for b.Loop() {
				ChatML{}.Render(c, true)
			}
		})
		// The model's own template through Jinja (--chat-template qwen3).
		b.Run(fmt.Sprintf("render-qwen3-jinja/%dk", size/1000), func(b *testing.B) {
			jt, err := NewJinjaTemplate(tokenizer.DefaultChatTemplate(), isQwenSpecial, nil)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := jt.Render(c, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// toolOutput is a file-like tool result whose lines all differ.
func toolOutput(i int) string {
	var b strings.Builder
	for j := 0; j < 40; j++ {
		fmt.Fprintf(&b, "%4d\tfunc handler%d_%d(w http.ResponseWriter, r *http.Request) error { return route(r.Context(), %d, \"v%x\") }\n", j+1, i, j, i*j, i*31+j*7)
	}
	return b.String()
}
