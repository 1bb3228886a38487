package engineshim

import (
	"slices"

	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/tokenizer"
)

// stopWatch finds a request's stop sequences in the simulated engine's
// output, which the engine core generates as token ids without reading
// them: it decodes each token as the frontend does and reports the one that
// completes a stop sequence, so that the request ends there, as vLLM and
// SGLang end one on their stop strings, instead of generating on to its
// natural end or max_tokens while the frontend shows nothing more.
type stopWatch struct {
	dec     *tokenizer.StreamDecoder
	stops   *chat.StopMatcher
	stopIDs []uint32 // end-of-turn tokens: never text (the frontend skips them too)
}

// newStopWatch watches for stops in text decoded with tok; nil when there
// is no stop sequence to watch for.
func newStopWatch(tok tokenizer.Tokenizer, stops []string, stopIDs []uint32) *stopWatch {
	m := chat.NewStopMatcher(stops)
	if m == nil {
		return nil
	}
	return &stopWatch{dec: tokenizer.NewStreamDecoder(tok), stops: m, stopIDs: stopIDs}
}

// hit adds one output token and reports whether the text now holds a stop
// sequence.
func (w *stopWatch) hit(id uint32) bool {
	if w.stops.Done() {
		return true
	}
	if slices.Contains(w.stopIDs, id) {
		return false
	}
	w.stops.Feed(w.dec.Next(id))
	return w.stops.Done()
}
