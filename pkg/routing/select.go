package routing

import "math"

// Rand is the randomness selection needs; *math/rand/v2.Rand satisfies it.
// Injected so that tests and the simulator are reproducible.
type Rand interface {
	IntN(n int) int
	Float64() float64
}

// argmin returns the index of the cheapest score, breaking ties uniformly at
// random with reservoir sampling (one pass, no allocation).
func argmin(scores []Score, rng Rand) int {
	best, ties := -1, 0
	for i := range scores {
		switch {
		case best < 0 || scores[i].Cost < scores[best].Cost:
			best, ties = i, 1
		case scores[i].Cost == scores[best].Cost:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// softmax samples an index with p_i ∝ exp(-(c_i − c_min) / ((c_max − c_min)·T)):
// costs are normalised to [0, 1] so the temperature means the same thing at
// any load; all-equal costs sample uniformly.
func softmax(scores []Score, temperature float64, rng Rand) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range scores {
		lo = math.Min(lo, scores[i].Cost)
		hi = math.Max(hi, scores[i].Cost)
	}
	if hi == lo {
		return rng.IntN(len(scores))
	}
	scale := (hi - lo) * temperature
	var total float64
	for i := range scores {
		total += math.Exp(-(scores[i].Cost - lo) / scale)
	}
	x := rng.Float64() * total
	for i := range scores {
		x -= math.Exp(-(scores[i].Cost - lo) / scale)
		if x < 0 {
			return i
		}
	}
	return len(scores) - 1
}
