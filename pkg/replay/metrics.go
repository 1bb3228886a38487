package replay

import (
	"maps"
	"slices"
	"time"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/kv"
)

// window measures a run from the end of the warmup to the end: the turns
// that complete inside it, and the turns still waiting or running when it
// closes (their waits so far count, as lower bounds).
type window struct {
	open       bool
	start, end time.Duration
	base       counters

	turns, sessionsDone, openTurns, clipped, waits, pauses, sheds int
	promptTokens, cachedTokens, idealTokens, routedTokens         int64
	outputTokens, evictedRecomputed                               int64
	cachedByTier                                                  [kv.NumTiers]int64
	pauseTime                                                     time.Duration
	ttft, itl, slowdown                                           []float64

	// The working set: Σ over active sessions of their last turn's tokens,
	// integrated over the window.
	workingSet int64
	wsAt       time.Duration
	wsIntegral float64 // token-seconds
}

// setContext records a session's new context size (0: it ended) at now.
func (w *window) setContext(now time.Duration, ss *sessState, tokens int) {
	w.integrate(now)
	w.workingSet += int64(tokens - ss.context)
	ss.context = tokens
}

// integrate adds the working set since the last change, inside the window.
func (w *window) integrate(now time.Duration) {
	if from := max(w.wsAt, w.start); now > from {
		w.wsIntegral += float64(w.workingSet) * (min(now, w.end) - from).Seconds()
	}
	w.wsAt = max(w.wsAt, now)
}

// counters are the engines' (and the hint loop's and pool's) running
// totals, read when the window opens and when it closes.
type counters struct {
	computed, generated          int64 // prefill (incl. recomputation) and decode tokens
	preemptRecomputed            int64
	preemptions, poolWrites      int64
	busy                         time.Duration // GPU time of computing steps
	hintsSent, hintBlocks        int64
	hintsUnsupported             int64
	hintResults                  map[string]int64
	poolEvictions, deviceEvicted int64
}

func (s *sim) counters() counters {
	var c counters
	for _, w := range s.workers {
		st := w.eng.Stats()
		c.computed += st.PromptTokens
		c.generated += st.GeneratedTokens
		c.preemptRecomputed += st.RePrefilledTokens
		c.preemptions += st.Preemptions
		c.poolWrites += st.PoolWrites
		c.deviceEvicted += st.Evictions[kv.TierDevice]
		// BusyTime counts a step whole when it starts: leave out the part
		// of the current one that lies ahead.
		busy := st.BusyTime
		if w.stepBusy > 0 && w.stepEnd > s.now {
			busy -= w.stepEnd - s.now
		}
		c.busy += busy
	}
	if h := s.hints; h != nil {
		c.hintsSent, c.hintBlocks, c.hintResults = h.sent, h.moved, maps.Clone(h.results)
		c.hintsUnsupported = int64(h.pol.Stats().Unsupported)
	}
	if s.pool != nil {
		c.poolEvictions = s.pool.Stats().Evictions
	}
	return c
}

func (s *sim) openWindow() {
	s.win.open = true
	s.win.base = s.counters()
}

// closeWindow counts the turns still open at the end: a turn without its
// first token has waited at least this long, a turn held by admission has
// paused at least this long.
func (s *sim) closeWindow() {
	w := s.win
	w.integrate(s.now)
	for i := range s.reqs {
		r := &s.reqs[i]
		if !r.active {
			continue
		}
		w.openTurns++
		if !r.gotFirst {
			w.ttft = append(w.ttft, ms(s.now-r.sent))
		}
		if r.waiting {
			w.waited(r.waitStart, s.now)
		}
	}
}

func (w *window) waitStarted(now time.Duration) {
	if w.open {
		w.waits++
	}
}

// waited adds the part of a wait from start to now that lies in the window.
func (w *window) waited(start, now time.Duration) {
	if d := min(now, w.end) - max(start, w.start); d > 0 {
		w.pauseTime += d
	}
}

func (w *window) shed() {
	if w.open {
		w.sheds++
	}
}

func (w *window) paused(n int) {
	if w.open {
		w.pauses += n
	}
}

func (w *window) firstToken(now, sent time.Duration) {
	if w.open {
		w.ttft = append(w.ttft, ms(now-sent))
	}
}

func (w *window) turnDone(s *sim, r *inflight, u enginesim.Usage) {
	if !w.open {
		return
	}
	w.turns++
	w.promptTokens += int64(u.PromptTokens)
	w.cachedTokens += int64(u.CachedTokens)
	for t, n := range u.CachedByTier {
		w.cachedByTier[t] += int64(n)
	}
	w.outputTokens += int64(u.CompletionTokens)
	w.idealTokens += int64(min(r.idealHit, u.PromptTokens))
	w.routedTokens += int64(min(r.routedHit, u.PromptTokens))
	if miss := r.routedHit - u.CachedTokens; miss > 0 {
		w.evictedRecomputed += int64(miss)
	}
	if r.clipped {
		w.clipped++
	}
	if u.CompletionTokens > 1 {
		w.itl = append(w.itl, ms(s.now-r.firstTok)/float64(u.CompletionTokens-1))
	}
}

func (w *window) sessionEnded(s *sim, ss *sessState) {
	if !w.open {
		return
	}
	w.sessionsDone++
	if ss.partial {
		return // joined mid-way: not a whole session's time
	}
	if alone := s.alone.session(ss.traceIdx); alone > 0 {
		w.slowdown = append(w.slowdown, float64(s.now-ss.started)/float64(alone))
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Result is the outcome of one run (one policy, concurrency and seed), over
// its window. Turn counts and token figures are those of the turns that
// completed inside the window. TTFT and pause time include the turns still
// waiting when it closed, with their waits so far: lower bounds.
type Result struct {
	Policy      string  `json:"policy"`
	Concurrency int     `json:"concurrency"`
	Seed        int64   `json:"seed"`
	Split       string  `json:"split"`
	Workers     int     `json:"workers"`
	WarmupS     float64 `json:"warmup_s"`
	WindowS     float64 `json:"window_s"`

	// Turns completed inside the window, and per minute (ThunderAgent's
	// steps/min).
	Turns       int     `json:"turns"`
	TurnsPerMin float64 `json:"turns_per_min"`
	// OpenTurns were still waiting or running when the window closed.
	OpenTurns int `json:"open_turns"`
	// SessionsStarted counts draws begun since the start of the run (the
	// first ones joined mid-way); SessionsCompleted top-level sessions
	// that ended inside the window (slowdown is over those that ran whole).
	SessionsStarted   int `json:"sessions_started"`
	SessionsCompleted int `json:"sessions_completed"`

	// ThroughputTokensPerS is prompt plus output tokens of the turns
	// completed in the window, per second.
	ThroughputTokensPerS float64 `json:"throughput_tokens_per_s"`
	OutputTokensPerS     float64 `json:"output_tokens_per_s"`
	// ComputeTokensPerS is what the GPUs computed in the window (prefill,
	// recomputation included, and decode), per second.
	ComputeTokensPerS float64 `json:"compute_tokens_per_s"`
	// BusyFraction is the share of the window the GPUs spent computing.
	BusyFraction float64 `json:"busy_fraction"`
	// GPUSecondsPerTurn is computing GPU time (× tensor-parallel degree)
	// per completed turn.
	GPUSecondsPerTurn float64 `json:"gpu_seconds_per_turn"`

	// PrefixHitRate is cached prompt tokens / prompt tokens of the turns
	// completed in the window; IdealHitRate is that of one infinite cache
	// on the same turns (every block any earlier turn sent, wherever it
	// went); RoutedIdealHitRate that of an infinite cache on each worker,
	// given where the turns were routed. Ideal − routed ideal is lost to
	// routing, routed ideal − prefix hit rate to eviction.
	PrefixHitRate      float64            `json:"prefix_hit_rate"`
	IdealHitRate       float64            `json:"ideal_hit_rate"`
	RoutedIdealHitRate float64            `json:"routed_ideal_hit_rate"`
	HitRateByTier      map[string]float64 `json:"hit_rate_by_tier"`
	PromptTokens       int64              `json:"prompt_tokens"`
	CachedTokens       int64              `json:"cached_tokens"`
	OutputTokens       int64              `json:"output_tokens"`
	// EvictedRecomputedTokens are prompt tokens the worker's cache had
	// held (the routed ideal) and the engine computed again: evicted
	// between turns. PreemptRecomputedTokens are the tokens preemptions
	// made the engines compute again.
	EvictedRecomputedTokens int64 `json:"evicted_recomputed_tokens"`
	PreemptRecomputedTokens int64 `json:"preempt_recomputed_tokens"`
	Preemptions             int64 `json:"preemptions"`
	ClippedTurns            int   `json:"clipped_turns"`

	// TTFT of the turns whose first token came in the window, and of the
	// turns still waiting for one when it closed (their wait so far).
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	ITLP50Ms  float64 `json:"itl_p50_ms"`
	ITLP99Ms  float64 `json:"itl_p99_ms"`
	// Session slowdown: a completed session's time over its time alone
	// on an idle cluster.
	SlowdownP50      float64 `json:"slowdown_p50"`
	SlowdownP99      float64 `json:"slowdown_p99"`
	SlowdownSessions int     `json:"slowdown_sessions"`

	// AdmissionWaits are turns held back in the window; Pauses programs
	// paused by admission ticks in it; PauseTimeS the time turns spent
	// held back inside the window, open waits included (a lower bound).
	AdmissionWaits int `json:"admission_waits"`
	Pauses         int `json:"pauses"`
	// Sheds are the times a new session's first turn was turned away
	// (admission control's Shed; the client retries after the delay it was
	// given, its wait counting in TTFT and pause time).
	Sheds      int     `json:"sheds"`
	PauseTimeS float64 `json:"pause_time_s"`

	// Tiers, the shared pool and hints, over the window.
	DeviceHitTokens    int64            `json:"device_hit_tokens"`
	HostHitTokens      int64            `json:"host_hit_tokens"`
	DiskHitTokens      int64            `json:"disk_hit_tokens"`
	SharedHitTokens    int64            `json:"shared_hit_tokens"`
	PoolWrites         int64            `json:"pool_writes,omitempty"`
	PoolEvictedObjects int64            `json:"pool_evicted_objects,omitempty"`
	HintsSent          int64            `json:"hints_sent,omitempty"`
	HintsByResult      map[string]int64 `json:"hints_by_result,omitempty"`
	HintBlocksMoved    int64            `json:"hint_blocks_moved,omitempty"`
	// HintsUnsupported are the policies' proposals not sent because the
	// worker's engine acts on nothing near them (no host tier to demote to).
	HintsUnsupported int64 `json:"hints_unsupported,omitempty"`
	// DeviceEvictions are blocks the engines evicted from GPU memory.
	DeviceEvictions int64 `json:"device_evictions"`
	// WorkingSetTokens is the mean over the window of the sessions'
	// contexts (each active session's last prompt and output): the KV the
	// cluster would need to keep every session resident; KVCapacityTokens
	// is the cluster's device KV (the oracle's: the others').
	WorkingSetTokens float64 `json:"working_set_tokens"`
	KVCapacityTokens int64   `json:"kv_capacity_tokens"`
}

func (s *sim) result() Result {
	w := s.win
	end := s.counters()
	b := w.base
	win := w.end - w.start
	r := Result{Policy: string(s.cfg.Policy), Concurrency: s.cfg.Concurrency, Seed: s.cfg.Seed, Split: string(s.cfg.Split),
		Workers: len(s.workers), WarmupS: s.cfg.Warmup.Seconds(), WindowS: win.Seconds(),
		Turns: w.turns, OpenTurns: w.openTurns, SessionsStarted: s.draws - s.pending, SessionsCompleted: w.sessionsDone,
		PromptTokens: w.promptTokens, CachedTokens: w.cachedTokens, OutputTokens: w.outputTokens,
		EvictedRecomputedTokens: w.evictedRecomputed, PreemptRecomputedTokens: end.preemptRecomputed - b.preemptRecomputed,
		Preemptions: end.preemptions - b.preemptions, ClippedTurns: w.clipped,
		AdmissionWaits: w.waits, Pauses: w.pauses, Sheds: w.sheds, PauseTimeS: w.pauseTime.Seconds(),
		PoolWrites: end.poolWrites - b.poolWrites, PoolEvictedObjects: end.poolEvictions - b.poolEvictions,
		HintsSent: end.hintsSent - b.hintsSent, HintBlocksMoved: end.hintBlocks - b.hintBlocks,
		HintsUnsupported: end.hintsUnsupported - b.hintsUnsupported,
		DeviceEvictions:  end.deviceEvicted - b.deviceEvicted,
		KVCapacityTokens: int64(s.cfg.Engine.NumGPUBlocks) * int64(s.engineBlock) * int64(len(s.workers)),
	}
	if s.hints != nil {
		r.HintsByResult = map[string]int64{}
		for k, v := range end.hintResults {
			r.HintsByResult[k] = v - b.hintResults[k]
		}
	}
	r.DeviceHitTokens, r.HostHitTokens = w.cachedByTier[kv.TierDevice], w.cachedByTier[kv.TierHost]
	r.DiskHitTokens, r.SharedHitTokens = w.cachedByTier[kv.TierDisk], w.cachedByTier[kv.TierShared]
	r.HitRateByTier = make(map[string]float64, kv.NumTiers)
	for t, n := range w.cachedByTier {
		if w.promptTokens > 0 {
			r.HitRateByTier[kv.Tier(t).String()] = float64(n) / float64(w.promptTokens)
		}
	}
	if w.promptTokens > 0 {
		r.PrefixHitRate = float64(w.cachedTokens) / float64(w.promptTokens)
		r.IdealHitRate = float64(w.idealTokens) / float64(w.promptTokens)
		r.RoutedIdealHitRate = float64(w.routedTokens) / float64(w.promptTokens)
	}
	if sec := win.Seconds(); sec > 0 {
		r.WorkingSetTokens = w.wsIntegral / sec
		r.TurnsPerMin = float64(w.turns) / (sec / 60)
		r.ThroughputTokensPerS = float64(w.promptTokens+w.outputTokens) / sec
		r.OutputTokensPerS = float64(w.outputTokens) / sec
		r.ComputeTokensPerS = float64(end.computed-b.computed+end.generated-b.generated) / sec
		r.BusyFraction = (end.busy - b.busy).Seconds() / sec / float64(len(s.workers))
	}
	if w.turns > 0 {
		tp := 1
		if rf, ok := s.workers[0].eng.Config().Perf.(enginesim.Roofline); ok {
			tp = rf.TP
		}
		r.GPUSecondsPerTurn = (end.busy - b.busy).Seconds() * float64(tp) / float64(w.turns)
	}
	r.TTFTP50Ms, r.TTFTP99Ms = percentile(w.ttft, 0.5), percentile(w.ttft, 0.99)
	r.ITLP50Ms, r.ITLP99Ms = percentile(w.itl, 0.5), percentile(w.itl, 0.99)
	r.SlowdownP50, r.SlowdownP99, r.SlowdownSessions = percentile(w.slowdown, 0.5), percentile(w.slowdown, 0.99), len(w.slowdown)
	return r
}

// percentile sorts xs in place and returns the nearest-rank q-quantile.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// TurnResult is one completed turn, for traces and timelines.
type TurnResult struct {
	SessionID, ParentSessionID string
	Turn                       int
	RequestID                  string
	Worker                     string
	Sent, FirstToken, Done     time.Duration // virtual time since the run started
	// Queued is how long the turn waited before its prefill began
	// (admission wait and engine queue), when known.
	Queued                    time.Duration
	InputTokens, OutputTokens int
	CachedTokens              int
	Clipped                   bool
	ToolCall                  bool
	Model                     string
	BlockSize                 int
	Hashes                    []kv.BlockHash // the engine block hashes of the prompt
}

func (s *sim) turnResult(r *inflight, u enginesim.Usage) TurnResult {
	ss := &s.sessions[r.session]
	t := &ss.s.Turns[r.turn]
	tr := TurnResult{SessionID: ss.id, Turn: r.turn, RequestID: r.id, Worker: s.workers[r.worker].id,
		Sent: r.sent, FirstToken: r.firstTok, Done: s.now, InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
		CachedTokens: u.CachedTokens, Clipped: r.clipped, ToolCall: t.ToolCall, Model: t.Model,
		BlockSize: s.engineBlock, Hashes: ss.prevHash, Queued: r.admitted - r.sent}
	if p := ss.parent; p >= 0 {
		tr.ParentSessionID = s.sessions[p].id
	}
	return tr
}
