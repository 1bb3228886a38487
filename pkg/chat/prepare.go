package chat

import (
	"bytes"
	"slices"

	"switchyard.dev/pkg/kvhash"
)

// Prepare renders c with t, ending where the assistant's answer begins, and
// preprocesses the prompt as Preprocess does, reusing prev (what the
// session's previous Prepare or Preprocess returned, or nil). With the
// default template the blocks both conversations begin with are not
// rendered again either: their segments, and those segments' tokens, are
// prev's. For a warm 100k-token agent turn, rendering the whole history
// again (copying every message into the prompt, re-encoding every past tool
// call) cost as much as tokenizing what is new.
//
// The result is Render's followed by Preprocess with prev == nil, by
// construction: ChatML renders block by block (the tools header, a message,
// a run of tool results), a block's segments depend only on its own
// messages, and a block is reused only when the messages it rendered are
// equal and, for a run of tool results, the run has not grown.
func Prepare(t Template, enc Encoder, h kvhash.Hasher, c *Conversation, prev *Session) (Tokenized, *Session, error) {
	if prev != nil && !prev.madeWith(enc, h) {
		prev = nil
	}
	cm, ok := t.(ChatML)
	if !ok {
		p, err := t.Render(c, true)
		if err != nil {
			return Tokenized{}, nil, err
		}
		tk, next := preprocess(enc, h, p, 0, prev)
		return tk, next, nil
	}
	var from *chatMLState
	var prompt Prompt
	if prev != nil {
		from, prompt = prev.chatML, prev.prompt
	}
	p, state, kept, err := cm.extend(c, from, prompt)
	if err != nil {
		return Tokenized{}, nil, err
	}
	tk, next := preprocess(enc, h, p, kept, prev)
	next.chatML = state
	return tk, next, nil
}

// chatMLState is what a ChatML rendering leaves for rendering the
// conversation's extension: the conversation (its own copy of the message
// and tool lists: a caller's list may share its backing array with another
// that is appended to, as two sub-agents branching from one history would;
// a frozen message list is kept as it is) and where each block ended.
type chatMLState struct {
	messages []Message
	tools    []Tool
	marks    []blockEnd
}

// extend renders c as Render does (with the generation prompt), resuming
// prev's rendering (whose segments are prompt) after the last block both
// conversations share; kept is how many leading segments are prompt's.
func (t ChatML) extend(c *Conversation, prev *chatMLState, prompt Prompt) (Prompt, *chatMLState, int, error) {
	var b promptBuilder
	from, header := 0, true
	if prev != nil {
		if j, ok := prev.resume(c); ok {
			mark := prev.marks[j]
			b.p = make(Prompt, mark.segs, mark.segs+16)
			copy(b.p, prompt[:mark.segs])
			b.marks = append(make([]blockEnd, 0, j+8), prev.marks[:j+1]...)
			b.text("\n") // what follows every block's ImEnd
			from, header = mark.msgs, false
		}
	}
	kept := len(b.p)
	if err := t.render(&b, c, from, header, true); err != nil {
		return nil, nil, 0, err
	}
	msgs := c.Messages
	if !c.frozen {
		msgs = slices.Clone(msgs)
	}
	state := &chatMLState{messages: msgs, tools: slices.Clone(c.Tools), marks: b.marks}
	return b.p, state, kept, nil
}

// resume is the last of s's block ends that c's rendering shares (ok false
// for none): the blocks up to it rendered messages c begins with, the tools
// header (the first block whenever there are tools) the same tools and the
// same leading system message, and a run of tool results at its end is not
// continued in c.
func (s *chatMLState) resume(c *Conversation) (int, bool) {
	if !sameTools(s.tools, c.Tools) {
		return 0, false
	}
	n := min(len(s.messages), len(c.Messages))
	common := 0
	if n > 0 && &s.messages[0] == &c.Messages[0] {
		// Views of one list, which nothing changes (s keeps a list it does
		// not own only when it is frozen): the same messages.
		common = n
	}
	for common < n && sameMessage(&s.messages[common], &c.Messages[common]) {
		common++
	}
	msgs := c.Messages
	for j := len(s.marks) - 1; j >= 0; j-- {
		m := s.marks[j].msgs
		switch {
		case m > common:
			continue
		case m == 0:
			// The header alone, which took no system message: c's must
			// not have one either.
			return j, len(msgs) == 0 || msgs[0].Role != RoleSystem
		case m < len(msgs) && msgs[m-1].Role == RoleTool && msgs[m].Role == RoleTool:
			continue // the run of tool results goes on: its block differs
		}
		return j, true
	}
	return 0, false
}

func sameMessage(a, b *Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.Reasoning == b.Reasoning &&
		a.ToolCallID == b.ToolCallID && a.Name == b.Name && slices.Equal(a.ToolCalls, b.ToolCalls)
}

func sameTools(a, b []Tool) bool {
	return slices.EqualFunc(a, b, func(x, y Tool) bool {
		return x.Name == y.Name && x.Description == y.Description &&
			x.HasDescription == y.HasDescription && bytes.Equal(x.Parameters, y.Parameters)
	})
}
