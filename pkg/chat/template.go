package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Segment is a piece of a rendered prompt: either text, tokenized as ordinary
// text (a control token spelled inside it stays text), or one special token.
type Segment struct {
	Text    string
	Special bool
}

// Prompt is a rendered prompt.
type Prompt []Segment

// String is the prompt as one string, as an engine rendering the same
// template would see it.
func (p Prompt) String() string {
	var b strings.Builder
	for _, s := range p {
		b.WriteString(s.Text)
	}
	return b.String()
}

// Template renders a conversation into a prompt.
type Template interface {
	// Render renders c; with generationPrompt the prompt ends where the
	// assistant's answer begins.
	Render(c *Conversation, generationPrompt bool) (Prompt, error)
}

// ChatML special tokens (Qwen's spelling).
const (
	ImStart = "<|im_start|>"
	ImEnd   = "<|im_end|>"
)

// ChatML is the built-in default template: ChatML turns with tools in the
// Hermes style Qwen models are trained on (tool list in the system turn,
// calls as <tool_call>{json}</tool_call>, results as <tool_response> blocks in
// a user turn). The wording of the tool instructions is Switchyard's own.
//
// Rendering is prefix-stable: a conversation extended by the assistant's
// answer and new messages renders to an extension of the previous prompt
// (up to the generation prompt), which is what makes a session's next turn a
// prefix-cache hit.
type ChatML struct{}

var _ Template = ChatML{}

type promptBuilder struct {
	p   Prompt
	buf strings.Builder
	// marks are where each block (the tools header, a message, a run of
	// tool results) ends, for rendering the conversation's extension.
	marks []blockEnd
}

// blockEnd marks the end of one block of a ChatML rendering: after msgs of
// the conversation's messages, at segs segments (the block's closing ImEnd
// included; the "\n" after it is still in the builder).
type blockEnd struct{ msgs, segs int }

func (b *promptBuilder) text(s string) { b.buf.WriteString(s) }

func (b *promptBuilder) special(s string) {
	b.flush()
	b.p = append(b.p, Segment{Text: s, Special: true})
}

func (b *promptBuilder) flush() {
	if b.buf.Len() > 0 {
		b.p = append(b.p, Segment{Text: b.buf.String()})
		b.buf.Reset()
	}
}

func (b *promptBuilder) open(role string) {
	b.special(ImStart)
	b.text(role)
	b.text("\n")
}

// close ends the block that leaves msgs messages rendered.
func (b *promptBuilder) close(msgs int) {
	b.special(ImEnd)
	b.marks = append(b.marks, blockEnd{msgs: msgs, segs: len(b.p)})
	b.text("\n")
}

// Render implements Template.
func (t ChatML) Render(c *Conversation, generationPrompt bool) (Prompt, error) {
	var b promptBuilder
	if err := t.render(&b, c, 0, true, generationPrompt); err != nil {
		return nil, err
	}
	return b.p, nil
}

// render renders c's messages from the from'th on into b, the tools header
// first when header is set.
func (ChatML) render(b *promptBuilder, c *Conversation, from int, header, generationPrompt bool) error {
	msgs := c.Messages
	i := from
	if header && len(c.Tools) > 0 {
		b.open(RoleSystem)
		if len(msgs) > 0 && msgs[0].Role == RoleSystem {
			b.text(msgs[0].Content)
			b.text("\n\n")
			i = 1
		}
		if err := writeTools(b, c.Tools); err != nil {
			return err
		}
		b.close(i)
	}
	for ; i < len(msgs); i++ {
		m := msgs[i]
		switch m.Role {
		case RoleSystem, RoleUser:
			b.open(m.Role)
			b.buf.Grow(len(m.Content) + 2) // one copy of long contents, no regrowth
			b.text(m.Content)
		case RoleAssistant:
			b.open(RoleAssistant)
			b.buf.Grow(len(m.Content) + 64*len(m.ToolCalls))
			b.text(m.Content)
			for j, tc := range m.ToolCalls {
				if j > 0 || m.Content != "" {
					b.text("\n")
				}
				b.text("<tool_call>\n")
				if err := writeCall(b, tc); err != nil {
					return err
				}
				b.text("\n</tool_call>")
			}
		case RoleTool:
			// A run of tool results is one user turn.
			b.open(RoleUser)
			n := 0
			for k := i; k < len(msgs) && msgs[k].Role == RoleTool; k++ {
				n += len(msgs[k].Content) + 40
			}
			b.buf.Grow(n)
			for first := i; i < len(msgs) && msgs[i].Role == RoleTool; i++ {
				if i > first {
					b.text("\n")
				}
				b.text("<tool_response>\n")
				b.text(msgs[i].Content)
				b.text("\n</tool_response>")
			}
			i--
		default:
			return fmt.Errorf("chat: unknown role %q", m.Role)
		}
		b.close(i + 1)
	}
	if generationPrompt {
		b.open(RoleAssistant)
	}
	b.flush()
	return nil
}

// writeTools lists the tools as one JSON object per line.
func writeTools(b *promptBuilder, tools []Tool) error {
	b.text("# Tools\n\nYou can call the functions below to help with the request. " +
		"Their signatures, one JSON object per line, are inside <tools></tools>:\n<tools>")
	for _, t := range tools {
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = json.RawMessage(`{}`)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, params); err != nil {
			return fmt.Errorf("chat: tool %q parameters: %w", t.Name, err)
		}
		fn := struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters"`
		}{t.Name, t.Description, compact.Bytes()}
		line, err := marshalNoEscape(struct {
			Type     string `json:"type"`
			Function any    `json:"function"`
		}{"function", fn})
		if err != nil {
			return err
		}
		b.text("\n")
		b.text(line)
	}
	b.text("\n</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments " +
		"inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
	return nil
}

// writeCall renders a past tool call the way the model would have produced it.
func writeCall(b *promptBuilder, tc ToolCall) error {
	args := json.RawMessage(strings.TrimSpace(tc.Arguments))
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	var compact bytes.Buffer
	if json.Valid(args) {
		_ = json.Compact(&compact, args)
		args = compact.Bytes()
	} else {
		// Not JSON: keep it, as a string, rather than fail the turn.
		s, _ := marshalNoEscape(tc.Arguments)
		args = json.RawMessage(s)
	}
	line, err := marshalNoEscape(struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}{tc.Name, args})
	if err != nil {
		return err
	}
	b.text(line)
	return nil
}

// marshalNoEscape is json.Marshal without HTML escaping (the model never saw
// \u003c for '<').
func marshalNoEscape(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}
