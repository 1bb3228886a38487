package enginesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// TableModel interpolates measured step times on two grids, like Dynamo's
// interpolated model (dynamo.md §7) but 2-D for prefill as well: prefill
// time by (new tokens, prefix tokens) of one request, decode time by (batch
// size, context tokens per sequence). Between grid points it is bilinear;
// beyond the grid it extends the nearest segment (so longer prompts keep
// getting slower), never going below zero. The usual source is a profiling
// sweep of the real engine (docs/simulator.md).
//
// A step with several prefill chunks is timed as one chunk of their total
// new tokens after the prefix that gives the same causal-attention work
// (Σ new·prefix + new²/2); a step that prefills and decodes costs the sum of
// both lookups, which counts the per-step overhead twice (a mixed step is
// rarely the whole cost of a run).
type TableModel struct {
	Prefill Grid `json:"prefill"`
	Decode  Grid `json:"decode"`
}

// Grid is a table of step times: MS[i][j] at (X[i], Y[j]). For prefill X
// is new tokens and Y prefix tokens; for decode X is the batch size and Y
// the context tokens per decoding sequence. A one-point axis is constant
// along it.
type Grid struct {
	X  []float64   `json:"x"`
	Y  []float64   `json:"y"`
	MS [][]float64 `json:"ms"`
}

var _ PerfModel = (*TableModel)(nil)

// ParseTableModel decodes and validates a JSON table model such as
//
//	{"prefill": {"x": [512, 8192], "y": [0, 131072], "ms": [[40, 900], [170, 2900]]},
//	 "decode":  {"x": [1, 64], "y": [1024, 65536], "ms": [[6, 8], [9, 60]]}}
func ParseTableModel(b []byte) (*TableModel, error) {
	var t TableModel
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("table model: %w", err)
	}
	for name, g := range map[string]*Grid{"prefill": &t.Prefill, "decode": &t.Decode} {
		if err := g.validate(); err != nil {
			return nil, fmt.Errorf("table model: %s: %w", name, err)
		}
	}
	return &t, nil
}

func (g *Grid) validate() error {
	if len(g.X) == 0 || len(g.Y) == 0 {
		return errors.New("needs at least one x and one y")
	}
	if len(g.MS) != len(g.X) {
		return fmt.Errorf("%d rows of ms for %d x values", len(g.MS), len(g.X))
	}
	for _, axis := range [][]float64{g.X, g.Y} {
		for i, v := range axis {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("invalid axis value %v", v)
			}
			if i > 0 && axis[i-1] >= v {
				return errors.New("axis values must increase")
			}
		}
	}
	for i, row := range g.MS {
		if len(row) != len(g.Y) {
			return fmt.Errorf("row %d has %d values for %d y values", i, len(row), len(g.Y))
		}
		for _, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("invalid time %v ms", v)
			}
		}
	}
	return nil
}

// StepTime implements PerfModel.
func (t *TableModel) StepTime(b *Batch) time.Duration {
	var d time.Duration
	if n := b.NewTokens(); n > 0 {
		d = ms(t.Prefill.at(float64(n), equivalentPrefix(b.Prefill, n)))
	}
	if b.DecodeRequests > 0 {
		ctx := float64(b.DecodeContextTokens) / float64(b.DecodeRequests)
		d = saturatingAdd(d, ms(t.Decode.at(float64(b.DecodeRequests), ctx)))
	}
	return d
}

// equivalentPrefix is the prefix after which one chunk of n new tokens does
// the causal-attention work of the given chunks: n·p + n²/2 = Σ(new·prefix
// + new²/2).
func equivalentPrefix(chunks []PrefillChunk, n int) float64 {
	if len(chunks) == 1 {
		return float64(chunks[0].PrefixTokens)
	}
	var work float64
	for _, c := range chunks {
		nn := float64(c.NewTokens)
		work += nn*float64(c.PrefixTokens) + nn*nn/2
	}
	fn := float64(n)
	return math.Max(0, (work-fn*fn/2)/fn)
}

// at interpolates bilinearly, extending the edge segments outwards.
func (g *Grid) at(x, y float64) float64 {
	i, fx := segment(g.X, x)
	j, fy := segment(g.Y, y)
	row := func(i int) float64 {
		r := g.MS[i]
		if len(r) == 1 {
			return r[0]
		}
		return r[j] + (r[j+1]-r[j])*fy
	}
	v := row(i)
	if len(g.X) > 1 {
		v += (row(i+1) - v) * fx
	}
	if math.IsNaN(v) {
		return math.Inf(1) // ∞·0 of a huge extrapolation: saturate
	}
	return math.Max(v, 0)
}

// segment returns the index of the segment of axis that x falls in (the
// first or last beyond the ends) and x's fraction along it, which is below 0
// or above 1 outside the axis. A one-point axis has no segment: (0, 0).
func segment(axis []float64, x float64) (int, float64) {
	if len(axis) == 1 {
		return 0, 0
	}
	i := sort.SearchFloat64s(axis, x) - 1
	i = min(max(i, 0), len(axis)-2)
	return i, (x - axis[i]) / (axis[i+1] - axis[i])
}
