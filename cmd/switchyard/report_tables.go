package main

// The Markdown tables a report template draws from its datasets.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"switchyard.dev/pkg/replay"
)

// table is a dataset's rows, by concurrency then policy, with each row's
// gain over base.
func (r *report) table(name, base string) (string, error) {
	rf, err := r.set(name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| policy | CC | turns/min (seed min–max) | vs " + base + " | tok/s | hit rate | ideal | TTFT p50 / p99 s | slowdown p50 / p99 | pause s | evicted-recomputed Mtok | preempt-recomputed Mtok | GPU busy | GPU-s / turn | open turns |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	rows := append([]replay.Row(nil), rf.Rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Concurrency < rows[j].Concurrency })
	for _, row := range rows {
		vs := "—"
		if row.Policy != base {
			if bl, err := r.row(name, base, row.Concurrency); err == nil {
				vs = gainText(row, bl)
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f (%.1f–%.1f) | %s | %s | %.3f | %.3f | %s / %s | %.2f / %.2f | %s | %.1f | %.2f | %.2f | %.2f | %.0f |\n",
			row.Policy, row.Concurrency, row.TurnsPerMin, row.TurnsPerMinMin, row.TurnsPerMinMax, vs, thousands(row.ThroughputTokensPerS),
			row.PrefixHitRate, row.IdealHitRate, secs(row.TTFTP50Ms), secs(row.TTFTP99Ms), row.SlowdownP50, row.SlowdownP99,
			thousands(row.PauseTimeS), row.EvictedRecomputedTokens/1e6, row.PreemptRecomputedTokens/1e6, row.BusyFraction, row.GPUSecondsPerTurn, row.OpenTurns)
	}
	return b.String(), nil
}

// workingSets is the table of each level's working set against the
// cluster's KV capacity (from the base policy's rows: the same sessions).
func (r *report) workingSets(name, base string) (string, error) {
	lv, err := r.levels(name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| CC | working set, M tokens | working set / cluster KV |\n|---:|---:|---:|\n")
	for _, c := range lv {
		row, err := r.row(name, base, c)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| %d | %.2f | %.2f |\n", c, row.WorkingSetTokens/1e6, row.WorkingSetTokens/float64(row.KVCapacityTokens))
	}
	return b.String(), nil
}

// tuning is the table of the variants with a prefix: turns/min per level,
// gain over base, and score.
func (r *report) tuning(name, prefix, base string) (string, error) {
	pols, err := r.policies(name)
	if err != nil {
		return "", err
	}
	lv, err := r.levels(name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	levelHeader(&b, []string{"variant"}, lv, ccColumn, "score (geo-mean vs "+base+")")
	for _, p := range pols {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		fmt.Fprintf(&b, "| %s |", p)
		for _, c := range lv {
			g, err := r.gain(name, p, base, c)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, " %s |", g)
		}
		s, err := r.score(name, p, base)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, " %.3f |\n", s)
	}
	return b.String(), nil
}

// tuneVsTest sets each chosen policy's gain over base on the tune split
// beside the same on the test split, per level.
func (r *report) tuneVsTest(tune, test, base string, pairs ...string) (string, error) {
	if len(pairs)%2 != 0 {
		return "", errors.New("tuneVsTest wants (tune label, test label) pairs")
	}
	lv, err := r.levels(test)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	levelHeader(&b, []string{"policy", "split"}, lv, ccColumn)
	for i := 0; i < len(pairs); i += 2 {
		for _, side := range []struct{ set, label, name string }{{tune, pairs[i], "tune (" + pairs[i] + ")"}, {test, pairs[i+1], "test"}} {
			fmt.Fprintf(&b, "| %s | %s |", pairs[i+1], side.name)
			for _, c := range lv {
				g, err := r.gain(side.set, side.label, base, c)
				if err != nil {
					return "", err
				}
				fmt.Fprintf(&b, " %s |", g)
			}
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

// hitsAt is the table of each policy's hit rate against the ideal and the
// routed ideal at one level.
func (r *report) hitsAt(name string, cc int) (string, error) {
	rows, err := r.rowsAt(name, cc)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| policy | prefix hit rate | routed ideal | ideal |\n|---|---:|---:|---:|\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %.4f | %.4f | %.4f |\n", row.Policy, row.PrefixHitRate, row.RoutedIdealHitRate, row.IdealHitRate)
	}
	return b.String(), nil
}

// levelHeader writes the header of a table with columns per level: the lead
// columns (left-aligned), perLevel's for each level and the tail's (figures,
// right-aligned).
func levelHeader(b *strings.Builder, lead []string, lv []int, perLevel func(cc int) []string, tail ...string) {
	cols := slices.Clone(lead)
	for _, c := range lv {
		cols = append(cols, perLevel(c)...)
	}
	cols = append(cols, tail...)
	b.WriteString("| " + strings.Join(cols, " | ") + " |\n|" + strings.Repeat("---|", len(lead)) + strings.Repeat("---:|", len(cols)-len(lead)) + "\n")
}

// ccColumn is the one column per level of most tables: CC<level>.
func ccColumn(cc int) []string { return []string{fmt.Sprintf("CC%d", cc)} }
