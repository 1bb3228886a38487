package chat

import "switchyard.dev/pkg/tokenizer"

// Answer turns a model's output tokens, one at a time, into what an API
// streams: text decoded incrementally (a multi-byte character waits for its
// last token), a leading <think> block split off as reasoning (so a
// <tool_call> inside the reasoning is never taken for a call), tool calls
// parsed when the request declared tools, and the text cut at the first stop
// sequence. End-of-turn token ids are never shown. The engine is given the
// stop sequences too and ends the generation at the first (vLLM's and
// SGLang's stop, the simulated engine's shim), so its usage counts the
// tokens up to it; until its end arrives Answer shows nothing more.
//
// An Answer is not safe for concurrent use.
type Answer struct {
	dec     *tokenizer.StreamDecoder
	think   *ThinkSplitter
	parser  ToolCallParser // nil: no tools declared, all text is content
	stopper *StopMatcher
	stopIDs []uint32
	calls   int
}

// AnswerPart is one piece of an answer, in order: exactly one field is set.
type AnswerPart struct {
	Reasoning string
	Content   string
	ToolCall  *ToolCall
}

// NewAnswer starts an answer decoded with tok; stops are the request's stop
// sequences, stopIDs the end-of-turn tokens, tools whether the request
// declared any.
func NewAnswer(tok tokenizer.Tokenizer, stops []string, stopIDs []uint32, tools bool) *Answer {
	a := &Answer{dec: tokenizer.NewStreamDecoder(tok), think: NewThinkSplitter(), stopper: NewStopMatcher(stops), stopIDs: stopIDs}
	if tools {
		a.parser = NewHermesParser()
	}
	return a
}

// Token adds one output token and emits what became certain.
func (a *Answer) Token(id uint32, emit func(AnswerPart) error) error {
	for _, s := range a.stopIDs {
		if id == s {
			return nil
		}
	}
	if a.stopper.Done() {
		return nil
	}
	return a.text(a.stopper.Feed(a.dec.Next(id)), emit)
}

// Finish ends the answer and emits everything still held.
func (a *Answer) Finish(emit func(AnswerPart) error) error {
	if !a.stopper.Done() {
		if err := a.text(a.stopper.Feed(a.dec.Flush()), emit); err != nil {
			return err
		}
	}
	if err := a.text(a.stopper.Flush(), emit); err != nil {
		return err
	}
	if err := a.parts(a.think.Flush(), emit); err != nil {
		return err
	}
	if a.parser != nil {
		return a.outputs(a.parser.Flush(), emit)
	}
	return nil
}

// StopSequence is the stop sequence that ended the answer, "" if none.
func (a *Answer) StopSequence() string { return a.stopper.Matched() }

// FinishReason is how the answer ended, in the OpenAI vocabulary the APIs
// map from: tool_calls when it called any tool, stop when a stop sequence
// cut it, length when the engine stopped at max_tokens, stop otherwise.
func (a *Answer) FinishReason(engineHitLength bool) string {
	switch {
	case a.calls > 0:
		return "tool_calls"
	case a.stopper.Done():
		return "stop"
	case engineHitLength:
		return "length"
	default:
		return "stop"
	}
}

func (a *Answer) text(t string, emit func(AnswerPart) error) error {
	if t == "" {
		return nil
	}
	return a.parts(a.think.Feed(t), emit)
}

func (a *Answer) parts(parts []ThinkPart, emit func(AnswerPart) error) error {
	for _, p := range parts {
		var err error
		switch {
		case p.Reasoning:
			err = emit(AnswerPart{Reasoning: p.Text})
		case a.parser == nil:
			err = emit(AnswerPart{Content: p.Text})
		default:
			err = a.outputs(a.parser.Feed(p.Text), emit)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *Answer) outputs(outs []Output, emit func(AnswerPart) error) error {
	for _, o := range outs {
		var err error
		switch {
		case o.ToolCall != nil:
			a.calls++
			err = emit(AnswerPart{ToolCall: o.ToolCall})
		case o.Content != "":
			err = emit(AnswerPart{Content: o.Content})
		}
		if err != nil {
			return err
		}
	}
	return nil
}
