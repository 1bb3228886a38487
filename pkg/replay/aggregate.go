package replay

import (
	"fmt"
	"math"
)

// Row is one (policy, concurrency) point over several seeds: the mean of
// every metric and, for the headline ones, the smallest and largest value
// over the seeds. Two rows whose [min, max] ranges overlap are a tie.
type Row struct {
	Policy      string  `json:"policy"`
	Concurrency int     `json:"concurrency"`
	Seeds       int     `json:"seeds"`
	Split       string  `json:"split"`
	WindowS     float64 `json:"window_s"`

	TurnsPerMin    float64 `json:"turns_per_min"`
	TurnsPerMinMin float64 `json:"turns_per_min_min"`
	TurnsPerMinMax float64 `json:"turns_per_min_max"`

	ThroughputTokensPerS    float64 `json:"throughput_tokens_per_s"`
	ThroughputTokensPerSMin float64 `json:"throughput_tokens_per_s_min"`
	ThroughputTokensPerSMax float64 `json:"throughput_tokens_per_s_max"`
	ComputeTokensPerS       float64 `json:"compute_tokens_per_s"`
	BusyFraction            float64 `json:"busy_fraction"`
	GPUSecondsPerTurn       float64 `json:"gpu_seconds_per_turn"`

	PrefixHitRate      float64 `json:"prefix_hit_rate"`
	PrefixHitRateMin   float64 `json:"prefix_hit_rate_min"`
	PrefixHitRateMax   float64 `json:"prefix_hit_rate_max"`
	IdealHitRate       float64 `json:"ideal_hit_rate"`
	RoutedIdealHitRate float64 `json:"routed_ideal_hit_rate"`

	TTFTP50Ms    float64 `json:"ttft_p50_ms"`
	TTFTP50MsMin float64 `json:"ttft_p50_ms_min"`
	TTFTP50MsMax float64 `json:"ttft_p50_ms_max"`
	TTFTP99Ms    float64 `json:"ttft_p99_ms"`
	TTFTP99MsMin float64 `json:"ttft_p99_ms_min"`
	TTFTP99MsMax float64 `json:"ttft_p99_ms_max"`
	SlowdownP50  float64 `json:"slowdown_p50"`
	SlowdownP99  float64 `json:"slowdown_p99"`
	PauseTimeS   float64 `json:"pause_time_s"`

	EvictedRecomputedTokens float64 `json:"evicted_recomputed_tokens"`
	PreemptRecomputedTokens float64 `json:"preempt_recomputed_tokens"`
	OpenTurns               float64 `json:"open_turns"`
	ClippedTurns            float64 `json:"clipped_turns"`
	Turns                   float64 `json:"turns"`
	WorkingSetTokens        float64 `json:"working_set_tokens"`
	KVCapacityTokens        int64   `json:"kv_capacity_tokens"`

	// Runs are the seeds' results.
	Runs []Result `json:"runs"`
}

// Aggregate folds the runs of one (policy, concurrency) point, one per
// seed, into a Row. The runs must share the policy, the concurrency, the
// split and the window.
func Aggregate(runs []Result) (Row, error) {
	if len(runs) == 0 {
		return Row{}, fmt.Errorf("replay: no runs to aggregate")
	}
	r0 := runs[0]
	for _, r := range runs[1:] {
		if r.Policy != r0.Policy || r.Concurrency != r0.Concurrency || r.Split != r0.Split || r.WindowS != r0.WindowS {
			return Row{}, fmt.Errorf("replay: runs of different points (%s cc%d %s %gs vs %s cc%d %s %gs)",
				r0.Policy, r0.Concurrency, r0.Split, r0.WindowS, r.Policy, r.Concurrency, r.Split, r.WindowS)
		}
	}
	stat := func(f func(Result) float64) (mean, lo, hi float64) {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, r := range runs {
			v := f(r)
			mean += v
			lo, hi = min(lo, v), max(hi, v)
		}
		return mean / float64(len(runs)), lo, hi
	}
	mean := func(f func(Result) float64) float64 { m, _, _ := stat(f); return m }
	row := Row{Policy: r0.Policy, Concurrency: r0.Concurrency, Seeds: len(runs), Split: r0.Split, WindowS: r0.WindowS,
		KVCapacityTokens: r0.KVCapacityTokens, Runs: runs}
	row.TurnsPerMin, row.TurnsPerMinMin, row.TurnsPerMinMax = stat(func(r Result) float64 { return r.TurnsPerMin })
	row.ThroughputTokensPerS, row.ThroughputTokensPerSMin, row.ThroughputTokensPerSMax = stat(func(r Result) float64 { return r.ThroughputTokensPerS })
	row.PrefixHitRate, row.PrefixHitRateMin, row.PrefixHitRateMax = stat(func(r Result) float64 { return r.PrefixHitRate })
	row.TTFTP50Ms, row.TTFTP50MsMin, row.TTFTP50MsMax = stat(func(r Result) float64 { return r.TTFTP50Ms })
	row.TTFTP99Ms, row.TTFTP99MsMin, row.TTFTP99MsMax = stat(func(r Result) float64 { return r.TTFTP99Ms })
	row.ComputeTokensPerS = mean(func(r Result) float64 { return r.ComputeTokensPerS })
	row.BusyFraction = mean(func(r Result) float64 { return r.BusyFraction })
	row.GPUSecondsPerTurn = mean(func(r Result) float64 { return r.GPUSecondsPerTurn })
	row.IdealHitRate = mean(func(r Result) float64 { return r.IdealHitRate })
	row.RoutedIdealHitRate = mean(func(r Result) float64 { return r.RoutedIdealHitRate })
	row.SlowdownP50 = mean(func(r Result) float64 { return r.SlowdownP50 })
	row.SlowdownP99 = mean(func(r Result) float64 { return r.SlowdownP99 })
	row.PauseTimeS = mean(func(r Result) float64 { return r.PauseTimeS })
	row.EvictedRecomputedTokens = mean(func(r Result) float64 { return float64(r.EvictedRecomputedTokens) })
	row.PreemptRecomputedTokens = mean(func(r Result) float64 { return float64(r.PreemptRecomputedTokens) })
	row.OpenTurns = mean(func(r Result) float64 { return float64(r.OpenTurns) })
	row.ClippedTurns = mean(func(r Result) float64 { return float64(r.ClippedTurns) })
	row.Turns = mean(func(r Result) float64 { return float64(r.Turns) })
	row.WorkingSetTokens = mean(func(r Result) float64 { return r.WorkingSetTokens })
	return row, nil
}

// Tie reports whether two rows' turns/min ranges over their seeds overlap:
// a difference inside the seeds' spread is not a difference.
func Tie(a, b Row) bool {
	return a.TurnsPerMinMin <= b.TurnsPerMinMax && b.TurnsPerMinMin <= a.TurnsPerMinMax
}
