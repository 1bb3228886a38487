package enginesim

import (
	"math"
	"time"
)

// PrefillChunk is one request's prompt work in a step: NewTokens computed
// now, after PrefixTokens of the same sequence whose KV is already on the
// device (a cached prefix, or earlier chunks). Attention over the prefix is
// what makes a long-context chunk costly.
type PrefillChunk struct {
	NewTokens    int
	PrefixTokens int
}

// Batch is the work of one engine step: the prefill chunks and the decodes
// that vLLM's scheduler mixes into one forward pass.
type Batch struct {
	Prefill []PrefillChunk
	// DecodeRequests decode one token each.
	DecodeRequests int
	// DecodeContextTokens is the sum over decoding requests of the tokens
	// their new token attends to (the KV each one reads).
	DecodeContextTokens int
	// KVUsage is the fraction of device blocks in use. Only MockerModel
	// reads it (Dynamo's decode polynomial is a function of it); it is not
	// a physical input.
	KVUsage float64
}

// NewTokens is the prefill tokens of the step.
func (b *Batch) NewTokens() int {
	n := 0
	for _, c := range b.Prefill {
		n += c.NewTokens
	}
	return n
}

// Empty reports a step with nothing to compute.
func (b *Batch) Empty() bool { return b.DecodeRequests == 0 && b.NewTokens() == 0 }

// PerfModel turns the work of a step into time. Implementations must be
// pure functions of their argument (the simulator relies on it for
// determinism) and return 0 for an empty batch.
type PerfModel interface {
	StepTime(b *Batch) time.Duration
}

// ms converts milliseconds to a Duration, saturating instead of
// overflowing (a table extrapolated far beyond its range) and mapping
// negative or NaN values to 0.
func ms(v float64) time.Duration { return seconds(v / 1e3) }

func seconds(v float64) time.Duration {
	if v <= 0 || math.IsNaN(v) {
		return 0
	}
	ns := v * float64(time.Second)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// saturatingAdd adds durations without wrapping past MaxInt64.
func saturatingAdd(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
