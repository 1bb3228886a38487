package chat

import "strings"

// Qwen3's thinking tags.
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// ThinkPart is a piece of model output: reasoning (the inside of the
// <think> block) or answer text.
type ThinkPart struct {
	Text      string
	Reasoning bool
}

// ThinkSplitter separates Qwen3's leading <think>…</think> block from the
// answer as the output streams, so each API can put the reasoning where it
// has a place for it (Chat's reasoning_content, a Responses reasoning item,
// an Anthropic thinking block). Only a block that opens the output counts
// (that is where the model writes it); any other "<think>" is answer text.
// The newlines framing the block (the template writes "<think>\n…\n</think>\n\n")
// are dropped. Text that may still turn out to be a tag or framing newlines
// is held back, never shown and retracted.
type ThinkSplitter struct {
	state   int // thinkStart, thinkIn, thinkAfter, thinkDone
	buf     string
	started bool // some reasoning text has been emitted
}

const (
	thinkStart = iota // undecided: output may begin with <think>
	thinkIn           // inside the block
	thinkAfter        // just after </think>: dropping newlines
	thinkDone         // answer text, passed through
)

// NewThinkSplitter returns a splitter for one generation.
func NewThinkSplitter() *ThinkSplitter { return &ThinkSplitter{} }

// Feed adds generated text and returns what became certain.
func (s *ThinkSplitter) Feed(text string) []ThinkPart {
	var out []ThinkPart
	s.buf += text
	for {
		switch s.state {
		case thinkStart:
			if strings.HasPrefix(s.buf, thinkOpen) {
				s.buf = s.buf[len(thinkOpen):]
				s.state = thinkIn
				continue
			}
			if strings.HasPrefix(thinkOpen, s.buf) {
				return out // still a possible "<think>"
			}
			s.state = thinkDone
		case thinkIn:
			if !s.started {
				s.buf = strings.TrimLeft(s.buf, "\n")
				if s.buf == "" {
					return out
				}
			}
			if i := strings.Index(s.buf, thinkClose); i >= 0 {
				out = s.reason(out, strings.TrimRight(s.buf[:i], "\n"))
				s.buf = s.buf[i+len(thinkClose):]
				s.state = thinkAfter
				continue
			}
			// Hold back a possible start of "</think>" and trailing newlines
			// (they frame the closing tag if it follows).
			keep := partialSuffix(s.buf, thinkClose)
			rest := s.buf[:len(s.buf)-keep]
			trimmed := strings.TrimRight(rest, "\n")
			out = s.reason(out, trimmed)
			s.buf = s.buf[len(trimmed):]
			return out
		case thinkAfter:
			s.buf = strings.TrimLeft(s.buf, "\n")
			if s.buf == "" {
				return out
			}
			s.state = thinkDone
		case thinkDone:
			if s.buf != "" {
				out = append(out, ThinkPart{Text: s.buf})
				s.buf = ""
			}
			return out
		}
	}
}

func (s *ThinkSplitter) reason(out []ThinkPart, text string) []ThinkPart {
	if text == "" {
		return out
	}
	s.started = true
	return append(out, ThinkPart{Text: text, Reasoning: true})
}

// Flush ends the stream and returns everything still held. An unterminated
// block (the model hit its token limit while thinking) is all reasoning.
func (s *ThinkSplitter) Flush() []ThinkPart {
	var out []ThinkPart
	switch s.state {
	case thinkIn:
		out = s.reason(out, strings.TrimRight(s.buf, "\n"))
	case thinkStart, thinkDone:
		if s.buf != "" {
			out = append(out, ThinkPart{Text: s.buf})
		}
	}
	s.buf = ""
	s.state = thinkDone
	return out
}

// SplitThinking splits a whole generation at once.
func SplitThinking(text string) (reasoning, content string) {
	s := NewThinkSplitter()
	var r, c strings.Builder
	for _, p := range append(s.Feed(text), s.Flush()...) {
		if p.Reasoning {
			r.WriteString(p.Text)
		} else {
			c.WriteString(p.Text)
		}
	}
	return r.String(), c.String()
}
