package main

// The admission goals, measured: each goal of docs/results.md's goals
// section as a row per level, the test half beside the tune half; and the
// ablation of session_aware's mechanisms.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"switchyard.dev/pkg/replay"
)

// fitsEdge is how far over the GPU KV a level's working set may be and
// still count as fitting: a level sized to the cluster lands a little over
// or under it with the session mix.
const fitsEdge = 1.05

// goal is one cell's verdict: the figure and whether it meets the target.
type goal struct {
	text string
	met  bool
}

func (g goal) String() string {
	if g.met {
		return g.text + " ✓"
	}
	return g.text + " ✗"
}

// goals renders the goals table. test and tune are the GPU-only runs
// (tuneLabel is session_aware's label there, capLabel kv_cap's), host and
// hostTune the runs with a host tier. A level's class comes from kv's
// working set over the cluster's GPU KV on the test half: fits (≤ fitsEdge),
// overloaded (≥ 4); with the host tier, within it (more than the GPU KV,
// at most GPU + host) or past it.
func (r *report) goals(test, tune, tuneLabel, capLabel, host, hostTune string) (string, error) {
	var b strings.Builder
	b.WriteString("| goal | CC | working set / GPU KV | test half | tune half |\n|---|---:|---:|---|---|\n")
	lv, err := r.levels(test)
	if err != nil {
		return "", err
	}
	for _, cc := range lv {
		kv, err := r.row(test, "kv", cc)
		if err != nil {
			return "", err
		}
		ws := kv.WorkingSetTokens / float64(kv.KVCapacityTokens)
		var name string
		var t, u goal
		var terr, uerr error
		switch {
		case ws <= fitsEdge:
			name = "fits: within ±2 % of kv, hit ≥ ideal − 0.02"
			t, terr = r.fitsAt(test, "session_aware", cc)
			u, uerr = r.fitsAt(tune, tuneLabel, cc)
		case ws >= 4:
			name = "overloaded: ≥ 1.15× the best baseline, TTFT p99 ≤ kv_cap's"
			t, terr = r.overloadAt(test, "session_aware", []string{"kv", "kv_sticky", "kv_cap", "thunderagent"}, "kv_cap", cc)
			u, uerr = r.overloadAt(tune, tuneLabel, []string{"kv", capLabel}, capLabel, cc)
		default:
			continue
		}
		if err := errors.Join(terr, uerr); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| %s | %d | %.3f | %s | %s |\n", name, cc, ws, t, u)
	}
	hl, err := r.levels(host)
	if err != nil {
		return "", err
	}
	for _, cc := range hl {
		kv, err := r.row(host, "kv", cc)
		if err != nil {
			return "", err
		}
		rf, err := r.set(host)
		if err != nil {
			return "", err
		}
		hostBlocks, hok := rf.Config["host_blocks"].(float64)
		gpuBlocks, gok := rf.Config["gpu_blocks"].(float64)
		if !hok || !gok || gpuBlocks <= 0 {
			return "", fmt.Errorf("dataset %q does not say its host and GPU blocks", host)
		}
		tiers := 1 + hostBlocks/gpuBlocks
		ws := kv.WorkingSetTokens / float64(kv.KVCapacityTokens)
		if ws > 1 && ws <= tiers {
			t, err := r.hostGoal(host, true, cc)
			if err != nil {
				return "", err
			}
			// The tune half runs the levels the tuning needed, not every
			// one of the test half's.
			u := "—"
			if tl, err := r.levels(hostTune); err == nil && slices.Contains(tl, cc) {
				g, err := r.hostGoal(hostTune, false, cc)
				if err != nil {
					return "", err
				}
				u = g.String()
			}
			fmt.Fprintf(&b, "| host tier %.0f×: ≥ 1.3× kv, hit ≥ 0.90, ≥ 85 %% of the oracle | %d | %.2f | %s | %s |\n", tiers-1, cc, ws, t, u)
			continue
		}
		if ws > tiers {
			t, err := r.pastTiers(host, cc)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "| host tier %.0f×, past what the tiers hold: each policy's share of the oracle | %d | %.2f | %s | — |\n", tiers-1, cc, ws, t)
		}
	}
	return b.String(), nil
}

// fitsAt is the fits goal at one level.
func (r *report) fitsAt(set, sa string, cc int) (goal, error) {
	s, k, err := r.pair(set, sa, "kv", cc)
	if err != nil {
		return goal{}, err
	}
	g := 100 * (s.TurnsPerMin/k.TurnsPerMin - 1)
	return goal{text: fmt.Sprintf("%+.1f %%, hit %.3f (ideal %.3f)", g, s.PrefixHitRate, s.IdealHitRate),
		met: g >= -2 && g <= 2 && s.PrefixHitRate >= s.IdealHitRate-0.02}, nil
}

// overloadAt is the overload goal at one level: session_aware over the
// best of the baselines present, and its TTFT p99 against kv_cap's.
func (r *report) overloadAt(set, sa string, baselines []string, capName string, cc int) (goal, error) {
	s, err := r.row(set, sa, cc)
	if err != nil {
		return goal{}, err
	}
	rows, err := r.rowsOf(set, cc, baselines)
	if err != nil {
		return goal{}, err
	}
	var best replay.Row
	for _, row := range rows {
		if row.TurnsPerMin > best.TurnsPerMin {
			best = row
		}
	}
	c, err := r.row(set, capName, cc)
	if err != nil {
		return goal{}, err
	}
	ratio := s.TurnsPerMin / best.TurnsPerMin
	return goal{text: fmt.Sprintf("%.2f× %s (%.1f vs %.1f), TTFT p99 %s s vs %s s", ratio, best.Policy, s.TurnsPerMin,
		best.TurnsPerMin, secs(s.TTFTP99Ms), secs(c.TTFTP99Ms)), met: ratio >= 1.15 && s.TTFTP99Ms <= c.TTFTP99Ms}, nil
}

// hostGoal is the host-tier goal at one level; without an oracle row (the
// tune half runs none) the share of the oracle is not given.
func (r *report) hostGoal(set string, withOracle bool, cc int) (goal, error) {
	s, k, err := r.pair(set, "session_aware", "kv", cc)
	if err != nil {
		return goal{}, err
	}
	ratio := s.TurnsPerMin / k.TurnsPerMin
	g := goal{text: fmt.Sprintf("%.2f× kv (%.1f vs %.1f), hit %.3f", ratio, s.TurnsPerMin, k.TurnsPerMin, s.PrefixHitRate),
		met: ratio >= 1.3 && s.PrefixHitRate >= 0.9}
	if withOracle {
		o, err := r.row(set, "oracle", cc)
		if err != nil {
			return goal{}, err
		}
		share := s.TurnsPerMin / o.TurnsPerMin
		g.text += fmt.Sprintf(", %.0f %% of the oracle", 100*share)
		g.met = g.met && share >= 0.85
	}
	return g, nil
}

// pastTiers lists each policy's turns/min as a share of the oracle's.
func (r *report) pastTiers(set string, cc int) (string, error) {
	o, err := r.row(set, "oracle", cc)
	if err != nil {
		return "", err
	}
	rows, err := r.rowsAt(set, cc)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, row := range rows {
		if row.Policy == "oracle" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f %%", row.Policy, 100*row.TurnsPerMin/o.TurnsPerMin))
	}
	return strings.Join(parts, ", "), nil
}

// ablation is the table of session_aware's variants in abl (one mechanism
// changed each) against the default's row in main, per level of abl:
// turns/min with the gain over the default, and TTFT p99.
func (r *report) ablation(abl, main, def string) (string, error) {
	pols, err := r.policies(abl)
	if err != nil {
		return "", err
	}
	lv, err := r.levels(abl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	levelHeader(&b, []string{"variant"}, lv, func(cc int) []string {
		return []string{fmt.Sprintf("CC%d: turns/min, vs the default", cc), "TTFT p99 s"}
	})
	row := func(name string, get func(cc int) (replay.Row, error)) error {
		fmt.Fprintf(&b, "| %s |", name)
		for _, c := range lv {
			a, err := get(c)
			if err != nil {
				return err
			}
			d, err := r.row(main, def, c)
			if err != nil {
				return err
			}
			g := "—"
			if name != def {
				g = gainText(a, d)
			}
			fmt.Fprintf(&b, " %.1f (%s) | %s |", a.TurnsPerMin, g, secs(a.TTFTP99Ms))
		}
		b.WriteString("\n")
		return nil
	}
	if err := row(def, func(cc int) (replay.Row, error) { return r.row(main, def, cc) }); err != nil {
		return "", err
	}
	for _, p := range pols {
		if err := row(p, func(cc int) (replay.Row, error) { return r.row(abl, p, cc) }); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}
