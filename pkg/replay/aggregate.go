package replay

import (
	"fmt"
	"math"
)

// Row is one (policy, concurrency) point over several seeds: the mean of
// every metric and, for the headline ones, the smallest and largest value
// over the seeds. Two rows whose turns/min [min, max] ranges overlap are a
// tie.
type Row struct {
	Policy      string `json:"policy"`
	Concurrency int    `json:"concurrency"`
	Seeds       int    `json:"seeds"`
	// SeedsWithTurns is how many seeds' runs completed a turn: the
	// metrics of turns are means over those.
	SeedsWithTurns int     `json:"seeds_with_turns"`
	Split          string  `json:"split"`
	WindowS        float64 `json:"window_s"`

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
	// A metric of turns (a hit rate, a TTFT) is the mean over the seeds
	// whose runs have any: a run in which no turn completed has no hit
	// rate, not a hit rate of 0. Rates per minute are over every run.
	every := func(Result) bool { return true }
	served := func(r Result) bool { return r.Turns > 0 }
	waited := func(r Result) bool { return r.Turns+r.OpenTurns > 0 }
	whole := func(r Result) bool { return r.SlowdownSessions > 0 }
	stat := func(has func(Result) bool, f func(Result) float64) (mean, lo, hi float64) {
		lo, hi = math.Inf(1), math.Inf(-1)
		n := 0
		for _, r := range runs {
			if !has(r) {
				continue
			}
			v := f(r)
			mean += v
			lo, hi = min(lo, v), max(hi, v)
			n++
		}
		if n == 0 {
			return 0, 0, 0
		}
		return mean / float64(n), lo, hi
	}
	mean := func(has func(Result) bool, f func(Result) float64) float64 { m, _, _ := stat(has, f); return m }
	row := Row{Policy: r0.Policy, Concurrency: r0.Concurrency, Seeds: len(runs), Split: r0.Split, WindowS: r0.WindowS,
		KVCapacityTokens: r0.KVCapacityTokens, Runs: runs}
	for _, r := range runs {
		if served(r) {
			row.SeedsWithTurns++
		}
	}
	row.TurnsPerMin, row.TurnsPerMinMin, row.TurnsPerMinMax = stat(every, func(r Result) float64 { return r.TurnsPerMin })
	row.ThroughputTokensPerS, row.ThroughputTokensPerSMin, row.ThroughputTokensPerSMax = stat(every, func(r Result) float64 { return r.ThroughputTokensPerS })
	row.PrefixHitRate, row.PrefixHitRateMin, row.PrefixHitRateMax = stat(served, func(r Result) float64 { return r.PrefixHitRate })
	row.TTFTP50Ms, row.TTFTP50MsMin, row.TTFTP50MsMax = stat(waited, func(r Result) float64 { return r.TTFTP50Ms })
	row.TTFTP99Ms, row.TTFTP99MsMin, row.TTFTP99MsMax = stat(waited, func(r Result) float64 { return r.TTFTP99Ms })
	row.ComputeTokensPerS = mean(every, func(r Result) float64 { return r.ComputeTokensPerS })
	row.BusyFraction = mean(every, func(r Result) float64 { return r.BusyFraction })
	row.GPUSecondsPerTurn = mean(served, func(r Result) float64 { return r.GPUSecondsPerTurn })
	row.IdealHitRate = mean(served, func(r Result) float64 { return r.IdealHitRate })
	row.RoutedIdealHitRate = mean(served, func(r Result) float64 { return r.RoutedIdealHitRate })
	row.SlowdownP50 = mean(whole, func(r Result) float64 { return r.SlowdownP50 })
	row.SlowdownP99 = mean(whole, func(r Result) float64 { return r.SlowdownP99 })
	row.PauseTimeS = mean(every, func(r Result) float64 { return r.PauseTimeS })
	row.EvictedRecomputedTokens = mean(every, func(r Result) float64 { return float64(r.EvictedRecomputedTokens) })
	row.PreemptRecomputedTokens = mean(every, func(r Result) float64 { return float64(r.PreemptRecomputedTokens) })
	row.OpenTurns = mean(every, func(r Result) float64 { return float64(r.OpenTurns) })
	row.ClippedTurns = mean(every, func(r Result) float64 { return float64(r.ClippedTurns) })
	row.Turns = mean(every, func(r Result) float64 { return float64(r.Turns) })
	row.WorkingSetTokens = mean(every, func(r Result) float64 { return r.WorkingSetTokens })
	return row, nil
}

// Tie reports whether two rows' turns/min ranges over their seeds overlap:
// a difference inside the seeds' spread is not a difference.
func Tie(a, b Row) bool {
	return a.TurnsPerMinMin <= b.TurnsPerMinMax && b.TurnsPerMinMin <= a.TurnsPerMinMax
}
