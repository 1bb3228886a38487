package replay

import (
	"time"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/trace"
)

// aloneModel is how long a session takes alone on an idle cluster: every
// turn on an idle engine that holds the session's previous prompt, its
// sub-agents beside it, its tool gaps as in the run. It is what session
// slowdown divides by, and it sets the first sessions' start offsets. It
// uses the engines' own perf model and chunk size, step by step for the
// prefill; decode steps at batch 1 grow linearly with the context, so
// they are costed at the mean context.
type aloneModel struct {
	s     *sim
	perf  enginesim.PerfModel
	chunk int
	speed float64 // the engines' speed-up
	memo  map[int]time.Duration
}

func newAloneModel(s *sim) *aloneModel {
	c := s.workers[0].eng.Config()
	return &aloneModel{s: s, perf: c.Perf, chunk: c.MaxNumBatchedTokens, speed: c.SpeedUp, memo: map[int]time.Duration{}}
}

// session is trace session ti's time alone, sub-agents included.
func (a *aloneModel) session(ti int) time.Duration {
	if d, ok := a.memo[ti]; ok {
		return d
	}
	ss := a.s.w.Sessions[ti]
	var t time.Duration
	var prev []uint64
	for j := range ss.Turns {
		turn := &ss.Turns[j]
		wait := a.s.gap(turn)
		for _, c := range turn.Children {
			wait = max(wait, a.session(c))
		}
		t += wait + a.turn(turn, prev)
		prev = turn.Blocks
	}
	var tail time.Duration
	for _, c := range ss.Tail {
		tail = max(tail, a.session(c))
	}
	t += tail
	a.memo[ti] = t
	return t
}

// firstCycle is a session's first turn alone plus the gap before its
// second: the interval its first sessions' starts are spread over.
func (a *aloneModel) firstCycle(ti int) time.Duration {
	ss := a.s.w.Sessions[ti]
	if len(ss.Turns) == 0 {
		return 0
	}
	d := a.turn(&ss.Turns[0], nil)
	if len(ss.Turns) > 1 {
		d += a.s.gap(&ss.Turns[1])
	}
	return d
}

// turn is one turn's time on an idle engine holding the previous prompt
// (prev, the previous turn's trace ids).
func (a *aloneModel) turn(t *trace.Turn, prev []uint64) time.Duration {
	s := a.s
	input, output := t.InputLen, max(t.OutputLen, 1)
	if limit := s.maxInput - output - 1; input > limit {
		input = max(limit, 1)
	}
	lcp := 0
	for lcp < len(t.Blocks) && lcp < len(prev) && t.Blocks[lcp] == prev[lcp] {
		lcp++
	}
	eb := s.engineBlock
	done := min(lcp*s.w.BlockSize/eb, (input-1)/eb) * eb
	var d time.Duration
	var b enginesim.Batch
	for done < input {
		n := min(a.chunk, input-done)
		b.Prefill = append(b.Prefill[:0], enginesim.PrefillChunk{NewTokens: n, PrefixTokens: done})
		d += a.perf.StepTime(&b)
		done += n
	}
	if output > 1 {
		b = enginesim.Batch{DecodeRequests: 1, DecodeContextTokens: input + output/2}
		d += time.Duration(output-1) * a.perf.StepTime(&b)
	}
	return time.Duration(float64(d) / a.speed)
}
