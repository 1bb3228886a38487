package main

// What a report template asks of its datasets: rows, gains, verdicts, the
// tuning rule and the checks its text rests on.

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"switchyard.dev/pkg/replay"
)

func (r *report) set(name string) (runFile, error) {
	rf, ok := r.data[name]
	if !ok {
		return rf, fmt.Errorf("no dataset %q", name)
	}
	return rf, nil
}

func (r *report) row(name, policy string, cc int) (replay.Row, error) {
	rf, err := r.set(name)
	if err != nil {
		return replay.Row{}, err
	}
	for _, row := range rf.Rows {
		if row.Policy == policy && row.Concurrency == cc {
			return row, nil
		}
	}
	return replay.Row{}, fmt.Errorf("dataset %q has no row %s at concurrency %d", name, policy, cc)
}

// pair is two policies' rows of a dataset at one level.
func (r *report) pair(name, a, b string, cc int) (replay.Row, replay.Row, error) {
	return r.pairAcross(name, a, name, b, cc)
}

// pairAcross is two policies' rows of two datasets at one level (a variant
// run apart from the row it is compared with).
func (r *report) pairAcross(setA, a, setB, b string, cc int) (replay.Row, replay.Row, error) {
	ra, err := r.row(setA, a, cc)
	if err != nil {
		return replay.Row{}, replay.Row{}, err
	}
	rb, err := r.row(setB, b, cc)
	return ra, rb, err
}

// rowsAt is every policy's row of a dataset at one level, in the order of
// its rows.
func (r *report) rowsAt(name string, cc int) ([]replay.Row, error) {
	pols, err := r.policies(name)
	if err != nil {
		return nil, err
	}
	return r.rowsOf(name, cc, pols)
}

// rowsOf is each policy's row of a dataset at one level, in their order.
func (r *report) rowsOf(name string, cc int, policies []string) ([]replay.Row, error) {
	rows := make([]replay.Row, 0, len(policies))
	for _, p := range policies {
		row, err := r.row(name, p, cc)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// gain is a row's turns/min over a baseline's at the same concurrency, as a
// signed percentage, written as a tie when their seed ranges overlap.
func (r *report) gain(name, policy, base string, cc int) (string, error) {
	a, b, err := r.pair(name, policy, base, cc)
	if err != nil {
		return "", err
	}
	return gainText(a, b), nil
}

// gainText writes a's turns/min over b's, a tie when the seed ranges
// overlap, and the paired gains seed by seed (both rows ran the same
// draws per seed), which say whether a tie leans one way.
func gainText(a, b replay.Row) string {
	if b.TurnsPerMin == 0 {
		return "—"
	}
	g := fmt.Sprintf("%+.1f %%", 100*(a.TurnsPerMin/b.TurnsPerMin-1))
	if lo, hi, ok := pairedGains(a, b); ok && len(a.Runs) > 1 {
		g += fmt.Sprintf(", per seed %+.0f…%+.0f %%", 100*lo, 100*hi)
	}
	if replay.Tie(a, b) {
		return "tie: " + g
	}
	return g
}

// pairedGains is the smallest and largest of a's turns/min over b's, seed
// by seed.
func pairedGains(a, b replay.Row) (lo, hi float64, ok bool) {
	bySeed := map[int64]float64{}
	for _, r := range b.Runs {
		bySeed[r.Seed] = r.TurnsPerMin
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range a.Runs {
		base, found := bySeed[r.Seed]
		if !found || base == 0 {
			return 0, 0, false
		}
		g := r.TurnsPerMin/base - 1
		lo, hi, ok = min(lo, g), max(hi, g), true
	}
	return lo, hi, ok
}

// verdict says how policy a compares with b at a concurrency: ahead of,
// behind, or tied with (seed ranges overlap).
func (r *report) verdict(name, a, b string, cc int) (string, error) {
	return r.verdictAcross(name, a, name, b, cc)
}

// verdictAcross is verdict for rows of two datasets (pairAcross).
func (r *report) verdictAcross(setA, a, setB, b string, cc int) (string, error) {
	ra, rb, err := r.pairAcross(setA, a, setB, b, cc)
	if err != nil {
		return "", err
	}
	return verdictOf(ra, rb), nil
}

func verdictOf(ra, rb replay.Row) string {
	switch {
	case replay.Tie(ra, rb):
		return "tied with"
	case ra.TurnsPerMin > rb.TurnsPerMin:
		return "ahead of"
	}
	return "behind"
}

func (r *report) levels(name string) ([]int, error) {
	rf, err := r.set(name)
	if err != nil {
		return nil, err
	}
	out := distinct(rf.Rows, func(row replay.Row) int { return row.Concurrency })
	sort.Ints(out)
	return out, nil
}

// policies are a dataset's policies (labels), in the order of its rows.
func (r *report) policies(name string) ([]string, error) {
	rf, err := r.set(name)
	if err != nil {
		return nil, err
	}
	return distinct(rf.Rows, func(row replay.Row) string { return row.Policy }), nil
}

// distinct is each value of key over the rows once, in their order.
func distinct[T comparable](rows []replay.Row, key func(replay.Row) T) []T {
	var out []T
	seen := map[T]bool{}
	for _, row := range rows {
		if k := key(row); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// score is a variant's geometric mean over the levels of its turns/min
// relative to base's: the rule defaults are chosen by on the tune split.
func (r *report) score(name, policy, base string) (float64, error) {
	lv, err := r.levels(name)
	if err != nil {
		return 0, err
	}
	var logSum float64
	for _, c := range lv {
		a, b, err := r.pair(name, policy, base, c)
		if err != nil {
			return 0, err
		}
		// A level where the base finished no turn has no ratio: a score
		// made of it would be NaN or infinite and beat or lose to every
		// other without saying why. A variant that finished none where
		// the base did scores 0 and ranks last.
		if !(b.TurnsPerMin > 0) {
			return 0, fmt.Errorf("dataset %q at concurrency %d: the base %s did %.1f turns/min: a variant is scored only against a base that finished turns",
				name, c, base, b.TurnsPerMin)
		}
		logSum += math.Log(a.TurnsPerMin / b.TurnsPerMin)
	}
	return math.Exp(logSum / float64(len(lv))), nil
}

// best is the variant (a policy label starting with prefix) with the best
// score, the geometric mean over the levels of every dataset given (one
// default for every cluster).
func (r *report) best(prefix, base string, names ...string) (string, error) {
	if len(names) == 0 {
		return "", errors.New("best wants at least one dataset")
	}
	pols, err := r.policies(names[0])
	if err != nil {
		return "", err
	}
	best, bestScore := "", math.Inf(-1)
	for _, p := range pols {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		logSum := 0.0
		for _, name := range names {
			s, err := r.score(name, p, base)
			if err != nil {
				return "", err
			}
			logSum += math.Log(s)
		}
		if s := logSum / float64(len(names)); s > bestScore {
			best, bestScore = p, s
		}
	}
	if best == "" {
		return "", fmt.Errorf("dataset %q has no policy starting with %q", names[0], prefix)
	}
	return best, nil
}

// oracleChecks lists every run (a policy at a level and a seed) whose
// turns/min is above the oracle's run of the same seed and level: the oracle
// bounds the policies when it is empty.
func (r *report) oracleChecks(name string) ([]string, error) {
	rf, err := r.set(name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, row := range rf.Rows {
		o, err := r.row(name, string(replay.PolicyOracle), row.Concurrency)
		if err != nil {
			return nil, err
		}
		bound := map[int64]float64{}
		for _, run := range o.Runs {
			bound[run.Seed] = run.TurnsPerMin
		}
		for _, run := range row.Runs {
			b, ok := bound[run.Seed]
			if !ok {
				return nil, fmt.Errorf("dataset %q: the oracle has no run of seed %d at CC%d", name, run.Seed, row.Concurrency)
			}
			if run.TurnsPerMin > b {
				extra := (run.TurnsPerMin - b) * run.WindowS / 60
				out = append(out, fmt.Sprintf("%s at CC%d, seed %d: %.0f turn(s) more than the oracle's run (%+.2f %%)", row.Policy, row.Concurrency, run.Seed, extra, 100*(run.TurnsPerMin/b-1)))
			}
		}
	}
	return out, nil
}

// oracleExceptionsTied reports whether every row with a run above the
// oracle's run of the same seed (oracleChecks) ties with the oracle's row.
func (r *report) oracleExceptionsTied(name string) (bool, error) {
	rf, err := r.set(name)
	if err != nil {
		return false, err
	}
	for _, row := range rf.Rows {
		o, err := r.row(name, string(replay.PolicyOracle), row.Concurrency)
		if err != nil {
			return false, err
		}
		for i, run := range row.Runs {
			if i < len(o.Runs) && run.TurnsPerMin > o.Runs[i].TurnsPerMin && !replay.Tie(row, o) {
				return false, nil
			}
		}
	}
	return true, nil
}

// aheadOf lists "policy at CCn" for every row (but the oracle's) ahead of
// base's at its level: outside the seeds' spread and above.
func (r *report) aheadOf(name, base string) ([]string, error) {
	rf, err := r.set(name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, row := range rf.Rows {
		if row.Policy == base || row.Policy == string(replay.PolicyOracle) {
			continue
		}
		b, err := r.row(name, base, row.Concurrency)
		if err != nil {
			return nil, err
		}
		if !replay.Tie(row, b) && row.TurnsPerMin > b.TurnsPerMin {
			out = append(out, fmt.Sprintf("%s at CC%d", row.Policy, row.Concurrency))
		}
	}
	return out, nil
}

// sameRows reports whether two policies' turns/min are equal, run by run,
// at every level.
func (r *report) sameRows(name, a, b string) (bool, error) {
	lv, err := r.levels(name)
	if err != nil {
		return false, err
	}
	for _, c := range lv {
		ra, rb, err := r.pair(name, a, b, c)
		if err != nil {
			return false, err
		}
		if len(ra.Runs) != len(rb.Runs) {
			return false, nil
		}
		for i := range ra.Runs {
			if ra.Runs[i].TurnsPerMin != rb.Runs[i].TurnsPerMin {
				return false, nil
			}
		}
	}
	return true, nil
}

// maxGainGap is the largest difference, in percentage points over the
// levels, between a policy's gain over base on one dataset (its tune
// variant) and on another (the test run).
func (r *report) maxGainGap(tune, tuneLabel, test, testLabel, base string) (float64, error) {
	lv, err := r.levels(test)
	if err != nil {
		return 0, err
	}
	worst := 0.0
	for _, c := range lv {
		g1, err := r.gainPct(tune, tuneLabel, base, c)
		if err != nil {
			return 0, err
		}
		g2, err := r.gainPct(test, testLabel, base, c)
		if err != nil {
			return 0, err
		}
		worst = max(worst, math.Abs(g1-g2))
	}
	return worst, nil
}

// gainPct is a's turns/min over b's at a level, in per cent.
func (r *report) gainPct(name, a, b string, cc int) (float64, error) {
	ra, rb, err := r.pair(name, a, b, cc)
	if err != nil {
		return 0, err
	}
	return 100 * (ra.TurnsPerMin/rb.TurnsPerMin - 1), nil
}

// leaning says which way a tie leans: +1 when a's turns/min are above b's
// in every seed's paired runs, -1 below in every one, 0 otherwise (or when
// the rows are not a tie).
func (r *report) leaning(name, a, b string, cc int) (int, error) {
	ra, rb, err := r.pair(name, a, b, cc)
	if err != nil {
		return 0, err
	}
	lo, hi, ok := pairedGains(ra, rb)
	switch {
	case !ok || !replay.Tie(ra, rb):
		return 0, nil
	case lo > 0:
		return 1, nil
	case hi < 0:
		return -1, nil
	}
	return 0, nil
}

// notTiedWith lists "policy at CCn" for every row whose policy starts with
// prefix and that is not a tie with the named policy's row at its level.
func (r *report) notTiedWith(name, prefix, with string) ([]string, error) {
	rf, err := r.set(name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, row := range rf.Rows {
		if !strings.HasPrefix(row.Policy, prefix) || row.Policy == with {
			continue
		}
		w, err := r.row(name, with, row.Concurrency)
		if err != nil {
			return nil, err
		}
		if !replay.Tie(row, w) {
			out = append(out, fmt.Sprintf("%s at CC%d", row.Policy, row.Concurrency))
		}
	}
	return out, nil
}

// notAheadOf lists the policies that policy is not ahead of at a level
// (ties and rows above it).
func (r *report) notAheadOf(name, policy string, cc int) ([]string, error) {
	return r.policiesAt(name, policy, cc, func(row, p replay.Row) bool {
		return replay.Tie(p, row) || row.TurnsPerMin >= p.TurnsPerMin
	})
}

// windows is every distinct window_s of a dataset's runs.
func (r *report) windows(name string) ([]float64, error) {
	rf, err := r.set(name)
	if err != nil {
		return nil, err
	}
	var out []float64
	seen := map[float64]bool{}
	for _, row := range rf.Rows {
		for _, run := range row.Runs {
			if !seen[run.WindowS] {
				seen[run.WindowS] = true
				out = append(out, run.WindowS)
			}
		}
	}
	return out, nil
}

// belowIdeal lists the policies whose hit rate at a level is below the
// ideal (routed: below the routed ideal) by more than rounding.
func (r *report) belowIdeal(name string, cc int, routed bool) ([]string, error) {
	rows, err := r.rowsAt(name, cc)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, row := range rows {
		ideal := row.IdealHitRate
		if routed {
			ideal = row.RoutedIdealHitRate
		}
		if row.PrefixHitRate < ideal-1e-9 {
			out = append(out, row.Policy)
		}
	}
	return out, nil
}

// tied reports whether every pair of the named rows at a level is a tie.
func (r *report) tied(name string, cc int, policies ...string) (bool, error) {
	rows, err := r.rowsOf(name, cc, policies)
	if err != nil {
		return false, err
	}
	for i := range rows {
		for j := i + 1; j < len(rows); j++ {
			if !replay.Tie(rows[i], rows[j]) {
				return false, nil
			}
		}
	}
	return true, nil
}

// notTied lists the policies whose row at a level is not a tie with base's.
func (r *report) notTied(name, base string, cc int) ([]string, error) {
	return r.policiesAt(name, base, cc, func(row, b replay.Row) bool { return !replay.Tie(row, b) })
}

// policiesAt lists the policies (but base) whose row at a level keeps
// against base's row.
func (r *report) policiesAt(name, base string, cc int, keep func(row, base replay.Row) bool) ([]string, error) {
	b, err := r.row(name, base, cc)
	if err != nil {
		return nil, err
	}
	rows, err := r.rowsAt(name, cc)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, row := range rows {
		if row.Policy != base && keep(row, b) {
			out = append(out, row.Policy)
		}
	}
	return out, nil
}

// sameConfig reports whether the datasets agree on a config value (the
// tune and test runs of one report must share seeds, warmup and window).
func (r *report) sameConfig(key string, names ...string) (bool, error) {
	var first any
	for i, n := range names {
		v, err := r.config(n, key)
		if err != nil {
			return false, err
		}
		if i == 0 {
			first = v
		} else if fmt.Sprint(v) != fmt.Sprint(first) {
			return false, nil
		}
	}
	return true, nil
}

func (r *report) config(name, key string) (any, error) {
	rf, err := r.set(name)
	if err != nil {
		return nil, err
	}
	v, ok := rf.Config[key]
	if !ok {
		return nil, fmt.Errorf("dataset %q has no config %q", name, key)
	}
	return v, nil
}
