package enginesim

import (
	"time"

	"switchyard.dev/pkg/kv"
)

// Output is what one request produced in a step.
type Output struct {
	RequestID string
	// Token is the new output token: a request produces exactly one per
	// step in which all its tokens have been computed.
	Token uint32
	// First is set on a request's first output token; CachedTokens then
	// says how many prompt tokens came from cache (time to first token is
	// the sum of step durations since Add).
	First        bool
	CachedTokens int
	// Finish is set on the request's last output, with its Usage.
	Finish FinishReason
	Usage  *Usage
}

// StepResult is the outcome of one scheduler iteration. Outputs and
// Preempted are reused by the next Step: copy what you keep. Events are
// freshly allocated and may be kept.
type StepResult struct {
	// Duration is how long the step took in simulated time (speed-up
	// applied); 0 when nothing was scheduled and nothing is loading.
	Duration       time.Duration
	Outputs        []Output
	Events         []kv.Event
	Preempted      []string // requests that lost their blocks in this step
	PrefillTokens  int      // prompt (and re-prefill) tokens computed
	DecodeRequests int      // requests that decoded one token
}

// sample appends the next output token of q and reports whether q finished
// (its blocks and slot are released at the end of the step).
func (e *Engine) sample(q *request, slot int32) bool {
	k := len(q.output)
	textLen := int(q.textLen)
	var tok uint32
	if k < textLen {
		v := e.cfg.Vocab
		// Multiply-shift instead of modulo: uniform enough, and a division
		// per token shows in the decode benchmark.
		tok = v[(splitmix64(&q.rng)>>32)*uint64(len(v))>>32]
	} else {
		tok = q.toolCall[k-textLen]
	}
	q.output = append(q.output, tok)
	var out *Output
	if n := len(e.outs); n < cap(e.outs) {
		e.outs = e.outs[:n+1]
		out = &e.outs[n]
		out.RequestID, out.Token, out.First, out.CachedTokens, out.Finish, out.Usage = q.id, tok, false, 0, FinishNone, nil
	} else {
		e.outs = append(e.outs, Output{RequestID: q.id, Token: tok})
		out = &e.outs[n]
	}
	if k == 0 {
		out.First = true
		out.CachedTokens = q.cachedTokens
	}
	switch {
	case k < textLen && q.isStop(tok):
		out.Finish = FinishStop
	case q.numTool > 0 && k == textLen+int(q.numTool)-1:
		out.Finish = FinishToolCalls
	case q.numTool == 0 && k == textLen-1:
		out.Finish = FinishStop
	case k+1 >= int(q.maxTokens):
		out.Finish = FinishLength
	}
	if out.Finish == FinishNone {
		return false
	}
	out.Usage = &Usage{
		PromptTokens:     len(q.prompt),
		CompletionTokens: len(q.output),
		CachedTokens:     q.cachedTokens,
		CachedByTier:     cachedByTier(q.cachedByTier),
	}
	q.state = stateDone
	e.done = append(e.done, slot)
	e.stats.Finished++
	return true
}

func cachedByTier(v [kv.NumTiers]int32) (out [kv.NumTiers]int) {
	for i, n := range v {
		out[i] = int(n)
	}
	return out
}
