package chat

import (
	"bytes"
	"slices"

	"switchyard.dev/pkg/kvhash"

	"switchyard.dev/pkg/extent"
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
	var blocks Prompt
	if prev != nil {
		from, blocks = prev.chatML, prev.prompt
	}
	p, state, kept, err := cm.extend(c, from, blocks)
	if err != nil {
		return Tokenized{}, nil, err
	}
	tk, next := preprocess(enc, h, p, kept, prev)
	// What follows the blocks in the arrays is overwritten by the next turn
	// that appends there, once they are released.
	next.splitTail(state.blocks)
	next.chatML = state
	state.release()
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
	// blocks is how many of the prompt's segments its blocks are. The
	// segments' and the marks' arrays may have room past them that the
	// next turn renders its blocks into (one turn: whichever claims the
	// extents first), so a history of a thousand messages is not copied
	// at every turn.
	blocks           int
	promptExt, mkExt *extent.Extent
}

// extend renders c as Render does (with the generation prompt), resuming
// prev's rendering (whose blocks are blocks) after the last block both
// conversations share; kept is how many leading segments are prev's. The
// state returned holds the arrays it rendered into until release.
func (t ChatML) extend(c *Conversation, prev *chatMLState, blocks Prompt) (Prompt, *chatMLState, int, error) {
	var b promptBuilder
	state := &chatMLState{}
	from, header := 0, true
	if prev != nil {
		if j, ok := prev.resume(c); ok {
			mark := prev.marks[j]
			b.p, state.promptExt = extent.Claim(blocks[:mark.segs], prev.promptExt)
			b.marks, state.mkExt = extent.Claim(prev.marks[:j+1], prev.mkExt)
			b.text("\n") // what follows every block's ImEnd
			from, header = mark.msgs, false
		}
	}
	if state.promptExt == nil {
		b.p, state.promptExt = extent.Claim[Segment](nil, nil)
		b.marks, state.mkExt = extent.Claim[blockEnd](nil, nil)
	}
	kept := len(b.p)
	if err := t.render(&b, c, from, header, true); err != nil {
		return nil, nil, 0, err // the claims are never released: the arrays take no more turns
	}
	state.messages = c.Messages
	if !c.frozen {
		state.messages = slices.Clone(c.Messages)
	}
	state.tools, state.marks = slices.Clone(c.Tools), b.marks
	if n := len(b.marks); n > 0 {
		state.blocks = b.marks[n-1].segs
	}
	return b.p, state, kept, nil
}

// release lets the next turn append to the arrays the prompt and its marks
// were rendered into: past s's blocks and marks, over the segments after
// the blocks, which the caller has copied and must no longer read there.
// (Had rendering outgrown a claimed array, the extent stands for the new
// array as well as the old: a turn claims one only through a view whose
// length is the count stored, and past that count nothing but the claimer
// reads either array.)
func (s *chatMLState) release() {
	s.promptExt.Set(s.blocks)
	s.mkExt.Set(len(s.marks))
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
