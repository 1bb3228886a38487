package replay

import (
	"maps"
	"slices"
	"time"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/kv"
)

type metrics struct {
	byReq            map[string]int32
	sessions         int
	turns            int
	promptTokens     int64
	cachedTokens     int64
	cachedByTier     [kv.NumTiers]int64
	outputTokens     int64
	evictedReprefill int64
	idealTokens      int64
	clipped          int
	waits            int
	pauses           int
	pauseTime        time.Duration
	ttft, itl        []float64
}

// windowSnap freezes the served-token counters when the steady state ends.
type windowSnap struct {
	at                  time.Duration
	prompt, output      int64
	computed, generated int64
}

func (s *sim) snapWindow() {
	c, g := s.engineTotals()
	s.window = &windowSnap{at: s.now, prompt: s.m.promptTokens, output: s.m.outputTokens, computed: c, generated: g}
}

func (s *sim) engineTotals() (computed, generated int64) {
	for _, w := range s.workers {
		st := w.eng.Stats()
		computed += st.PromptTokens
		generated += st.GeneratedTokens
	}
	return
}

// Result is the outcome of one run. Throughputs are over the steady-state
// window: from the start until the first session ends that no queued
// session can replace (so every level is measured while it really has its
// concurrency); the whole-run figures follow.
type Result struct {
	Policy      string `json:"policy"`
	Concurrency int    `json:"concurrency"`
	Workers     int    `json:"workers"`
	Sessions    int    `json:"sessions"`
	Turns       int    `json:"turns"`

	// ThroughputTokensPerS is the model's token throughput: prompt tokens
	// served (computed or from cache) plus generated tokens, per second of
	// the steady window.
	ThroughputTokensPerS float64 `json:"throughput_tokens_per_s"`
	// ServedPromptTokensPerS counts prompt tokens only.
	ServedPromptTokensPerS float64 `json:"served_prompt_tokens_per_s"`
	// ComputeTokensPerS is what the GPUs computed: prefill (including
	// re-prefill) plus decode tokens, per second of the steady window.
	ComputeTokensPerS float64 `json:"compute_tokens_per_s"`
	OutputTokensPerS  float64 `json:"output_tokens_per_s"`
	WindowS           float64 `json:"window_s"`

	// PrefixHitRate is cached prompt tokens / prompt tokens over all turns.
	PrefixHitRate float64 `json:"prefix_hit_rate"`
	// IdealHitRate is the hit rate of an infinite cache that keeps every
	// session's previous prompt (its turns' common prefixes).
	IdealHitRate float64 `json:"ideal_hit_rate"`
	// ReprefillTokens are prompt tokens computed again although the session
	// had computed them before (evicted between turns), plus tokens
	// recomputed after a preemption.
	ReprefillTokens  int64 `json:"reprefill_tokens"`
	EvictedReprefill int64 `json:"evicted_reprefill_tokens"`
	PreemptReprefill int64 `json:"preempt_reprefill_tokens"`
	Preemptions      int64 `json:"preemptions"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	PrefillComputed  int64 `json:"prefill_computed_tokens"`
	// Prompt tokens served from each tier at the turns' first admission
	// (they sum to CachedTokens), and as fractions of PromptTokens (they
	// sum to PrefixHitRate).
	DeviceHitTokens int64              `json:"device_hit_tokens"`
	HostHitTokens   int64              `json:"host_hit_tokens"`
	DiskHitTokens   int64              `json:"disk_hit_tokens"`
	SharedHitTokens int64              `json:"shared_hit_tokens"`
	HitRateByTier   map[string]float64 `json:"hit_rate_by_tier"`
	// PoolWrites are blocks the engines wrote to the shared pool (evicted
	// from their last local tier); PoolEvictedObjects the objects the pool
	// evicted to make room.
	PoolWrites         int64 `json:"pool_writes,omitempty"`
	PoolEvictedObjects int64 `json:"pool_evicted_objects,omitempty"`
	// HintsSent are the hint actions the policies sent to engines (with
	// Config.Hints), HintsByResult the engines' answers, HintBlocksMoved the
	// blocks the engines moved for them.
	HintsSent       int64            `json:"hints_sent,omitempty"`
	HintsByResult   map[string]int64 `json:"hints_by_result,omitempty"`
	HintBlocksMoved int64            `json:"hint_blocks_moved,omitempty"`
	ClippedTurns    int              `json:"clipped_turns"`
	AdmissionWaits  int              `json:"admission_waits"`
	Pauses          int              `json:"pauses"`
	PauseTimeS      float64          `json:"pause_time_s"`

	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	ITLP50Ms  float64 `json:"itl_p50_ms"`
	ITLP99Ms  float64 `json:"itl_p99_ms"`

	MakespanS          float64 `json:"makespan_s"`
	WholeRunTokensPerS float64 `json:"whole_run_tokens_per_s"`
	BusyFraction       float64 `json:"busy_fraction"`
}

func (s *sim) result() Result {
	m := &s.m
	if s.window == nil {
		s.snapWindow()
	}
	comp, gen := s.engineTotals()
	r := Result{Policy: string(s.cfg.Policy), Concurrency: s.cfg.Concurrency, Workers: len(s.workers),
		Sessions: m.sessions, Turns: m.turns, PromptTokens: m.promptTokens, CachedTokens: m.cachedTokens,
		OutputTokens: m.outputTokens, PrefillComputed: comp, ClippedTurns: m.clipped, AdmissionWaits: m.waits,
		Pauses: m.pauses, PauseTimeS: m.pauseTime.Seconds(), EvictedReprefill: m.evictedReprefill,
		MakespanS: s.now.Seconds(), WindowS: s.window.at.Seconds()}
	var busy time.Duration
	for _, w := range s.workers {
		st := w.eng.Stats()
		r.Preemptions += st.Preemptions
		r.PreemptReprefill += st.RePrefilledTokens
		r.PoolWrites += st.PoolWrites
		busy += st.BusyTime
	}
	r.ReprefillTokens = r.EvictedReprefill + r.PreemptReprefill
	r.DeviceHitTokens, r.HostHitTokens = m.cachedByTier[kv.TierDevice], m.cachedByTier[kv.TierHost]
	r.DiskHitTokens, r.SharedHitTokens = m.cachedByTier[kv.TierDisk], m.cachedByTier[kv.TierShared]
	r.HitRateByTier = make(map[string]float64, kv.NumTiers)
	for t, n := range m.cachedByTier {
		if m.promptTokens > 0 {
			r.HitRateByTier[kv.Tier(t).String()] = float64(n) / float64(m.promptTokens)
		}
	}
	if s.pool != nil {
		r.PoolEvictedObjects = s.pool.Stats().Evictions
	}
	if h := s.hints; h != nil {
		r.HintsSent, r.HintBlocksMoved = h.sent, h.moved
		r.HintsByResult = maps.Clone(h.results)
	}
	if m.promptTokens > 0 {
		r.PrefixHitRate = float64(m.cachedTokens) / float64(m.promptTokens)
		r.IdealHitRate = float64(m.idealTokens) / float64(m.promptTokens)
	}
	if w := s.window.at.Seconds(); w > 0 {
		r.ThroughputTokensPerS = float64(s.window.prompt+s.window.output) / w
		r.ServedPromptTokensPerS = float64(s.window.prompt) / w
		r.OutputTokensPerS = float64(s.window.output) / w
		r.ComputeTokensPerS = float64(s.window.computed+s.window.generated) / w
	}
	if r.MakespanS > 0 {
		r.WholeRunTokensPerS = float64(m.promptTokens+m.outputTokens) / r.MakespanS
		r.BusyFraction = busy.Seconds() / r.MakespanS / float64(len(s.workers))
	}
	_ = gen
	r.TTFTP50Ms, r.TTFTP99Ms = percentile(m.ttft, 0.5), percentile(m.ttft, 0.99)
	r.ITLP50Ms, r.ITLP99Ms = percentile(m.itl, 0.5), percentile(m.itl, 0.99)
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
	tr := TurnResult{SessionID: ss.s.ID, Turn: r.turn, RequestID: r.id, Worker: s.workers[r.worker].id,
		Sent: r.sent, FirstToken: r.firstTok, Done: s.now, InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
		CachedTokens: u.CachedTokens, Clipped: r.clipped, ToolCall: t.ToolCall, Model: t.Model,
		BlockSize: s.engineBlock, Hashes: ss.prevHash, Queued: r.admitted - r.sent}
	if p := ss.s.Parent; p >= 0 {
		tr.ParentSessionID = s.w.Sessions[p].ID
	}
	return tr
}
