package replay

import (
	"time"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/trace"
)

// aloneModel is how long a session takes alone on an idle cluster: every
// turn on an idle engine that holds the session's previous prompt, its
// sub-agents beside it, its tool gaps as in the run. It is what session
// slowdown divides by, and where the first sessions join the run. It
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
	for j := range ss.Turns {
		t += a.cycle(ss, j)
	}
	var tail time.Duration
	for _, c := range ss.Tail {
		tail = max(tail, a.session(c))
	}
	t += tail
	a.memo[ti] = t
	return t
}

// cycle is turn j's part of the session alone: its tool gap or its
// sub-agents, whichever ends later, then the turn on an idle engine that
// holds the previous prompt.
func (a *aloneModel) cycle(ss *trace.Session, j int) time.Duration {
	turn := &ss.Turns[j]
	wait := a.s.gap(turn)
	for _, c := range turn.Children {
		wait = max(wait, a.session(c))
	}
	var prev *trace.Turn
	if j > 0 {
		prev = &ss.Turns[j-1]
	}
	return wait + a.turn(turn, prev)
}

// joinAt places a session joining a running fleet at fraction u of its
// turns' time alone: the turn whose cycle that moment falls in, and what is
// left then of the turn's tool gap (none once the moment is past it: the
// turn is sent at once).
func (a *aloneModel) joinAt(ti int, u float64) (turn int, gapLeft time.Duration) {
	ss := a.s.w.Sessions[ti]
	cycles := make([]time.Duration, len(ss.Turns))
	var total time.Duration
	for j := range ss.Turns {
		cycles[j] = a.cycle(ss, j)
		total += cycles[j]
	}
	x := time.Duration(u * float64(total))
	for j, c := range cycles {
		if x < c || j == len(cycles)-1 {
			return j, max(a.s.gap(&ss.Turns[j])-x, 0)
		}
		x -= c
	}
	return 0, 0 // no turns: the session only has tail sub-agents
}

// turn is one turn's time on an idle engine holding the previous prompt
// (prev, the previous turn, nil for the first).
func (a *aloneModel) turn(t, prev *trace.Turn) time.Duration {
	s := a.s
	input, output := s.clip(t)
	done := 0
	if prev != nil {
		lcp := 0
		for lcp < len(t.Blocks) && lcp < len(prev.Blocks) && t.Blocks[lcp] == prev.Blocks[lcp] {
			lcp++
		}
		prevInput, _ := s.clip(prev)
		eb := s.engineBlock
		// The engine block size may not divide the trace's: only whole
		// engine blocks of the common prefix, of the previous prompt as it
		// was sent, are cached.
		done = min(lcp*s.w.BlockSize/eb, prevInput/eb, (input-1)/eb) * eb
	}
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
