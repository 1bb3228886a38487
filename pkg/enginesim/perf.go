package enginesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"time"
)

// PrefillBatch describes the prompt work of one step.
type PrefillBatch struct {
	NewTokens    int // prompt (or re-prefill) tokens computed in this step
	CachedTokens int // prefix tokens of the newly admitted requests served from cache
	Requests     int // requests with prefill work in this step
}

// DecodeBatch describes the decode work of one step.
type DecodeBatch struct {
	Requests      int     // requests decoding one token
	KVUsage       float64 // device KV blocks in use / capacity, in [0, 1]
	ContextTokens int     // total context length of the decoding requests
}

// PerfModel turns the work of a step into time. Implementations must be pure
// functions of their arguments (the simulator relies on it for determinism).
type PerfModel interface {
	// PrefillTime is the cost of the step's prompt work; 0 when NewTokens is 0.
	PrefillTime(b PrefillBatch) time.Duration
	// DecodeTime is the cost of one decode iteration; 0 when Requests is 0.
	DecodeTime(b DecodeBatch) time.Duration
}

// PolynomialModel is the quadratic fit used by Dynamo's mocker (dynamo.md §7).
// Times are in milliseconds.
type PolynomialModel struct {
	PrefillA, PrefillB, PrefillC float64 // ms = A·N² + B·N + C
	DecodeA, DecodeB, DecodeC    float64 // ms = A·u² + B·u + C
	DecodeFloorMs                float64
}

// DefaultPerfModel returns the mocker's polynomials.
func DefaultPerfModel() PolynomialModel {
	return PolynomialModel{
		PrefillA: 4.209989e-7, PrefillB: 1.518344e-2, PrefillC: 16.50142,
		DecodeA: -25.74, DecodeB: 54.01, DecodeC: 5.74,
		DecodeFloorMs: 1,
	}
}

var _ PerfModel = PolynomialModel{}

func (p PolynomialModel) PrefillTime(b PrefillBatch) time.Duration {
	if b.NewTokens <= 0 {
		return 0
	}
	n := float64(b.NewTokens)
	return ms(p.PrefillA*n*n + p.PrefillB*n + p.PrefillC)
}

func (p PolynomialModel) DecodeTime(b DecodeBatch) time.Duration {
	if b.Requests <= 0 {
		return 0
	}
	u := b.KVUsage
	return ms(math.Max(p.DecodeA*u*u+p.DecodeB*u+p.DecodeC, p.DecodeFloorMs))
}

func ms(v float64) time.Duration {
	if v <= 0 || math.IsNaN(v) {
		return 0
	}
	ns := v * float64(time.Millisecond)
	if ns >= math.MaxInt64 {
		return math.MaxInt64 // a table extrapolated far beyond its range
	}
	return time.Duration(ns)
}

// Point is one measured sample of a TableModel.
type Point struct {
	X  float64 `json:"x"`
	Ms float64 `json:"ms"`
}

// TableModel interpolates measured step times linearly: prefill time by new
// prompt tokens, decode time by KV usage. Outside the measured range it
// extends the nearest segment (so longer prompts keep getting slower), never
// going below zero. Typical source: a profiling sweep of the real engine.
type TableModel struct {
	// Prefill: X = new prompt tokens in the step.
	Prefill []Point `json:"prefill"`
	// Decode: X = KV usage in [0, 1].
	Decode []Point `json:"decode"`
	// DecodeFloorMs bounds decode time from below (default 1 ms).
	DecodeFloorMs float64 `json:"decode_floor_ms,omitempty"`
}

var _ PerfModel = (*TableModel)(nil)

// LoadTableModel reads a TableModel from a JSON file such as
//
//	{"prefill": [{"x": 128, "ms": 18.2}, {"x": 8192, "ms": 170}],
//	 "decode":  [{"x": 0, "ms": 6}, {"x": 1, "ms": 34}]}
func LoadTableModel(path string) (*TableModel, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTableModel(b)
}

// ParseTableModel decodes and validates a JSON table model.
func ParseTableModel(b []byte) (*TableModel, error) {
	var t TableModel
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("table model: %w", err)
	}
	if err := t.normalize(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *TableModel) normalize() error {
	if len(t.Prefill) == 0 || len(t.Decode) == 0 {
		return errors.New("table model: needs at least one prefill and one decode point")
	}
	for _, pts := range [][]Point{t.Prefill, t.Decode} {
		sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
		for i, p := range pts {
			if math.IsNaN(p.X) || math.IsNaN(p.Ms) || math.IsInf(p.X, 0) || math.IsInf(p.Ms, 0) || p.Ms < 0 {
				return fmt.Errorf("table model: invalid point %+v", p)
			}
			if i > 0 && pts[i-1].X == p.X {
				return fmt.Errorf("table model: duplicate x %v", p.X)
			}
		}
	}
	if t.DecodeFloorMs == 0 {
		t.DecodeFloorMs = 1
	}
	return nil
}

func (t *TableModel) PrefillTime(b PrefillBatch) time.Duration {
	if b.NewTokens <= 0 {
		return 0
	}
	return ms(interpolate(t.Prefill, float64(b.NewTokens)))
}

func (t *TableModel) DecodeTime(b DecodeBatch) time.Duration {
	if b.Requests <= 0 {
		return 0
	}
	return ms(math.Max(interpolate(t.Decode, b.KVUsage), t.DecodeFloorMs))
}

// interpolate evaluates the piecewise-linear function through pts (sorted by
// X) at x, extending the first and last segments beyond the ends.
func interpolate(pts []Point, x float64) float64 {
	if len(pts) == 1 {
		return pts[0].Ms
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].X >= x })
	switch {
	case i == 0:
		i = 1
	case i == len(pts):
		i = len(pts) - 1
	}
	a, b := pts[i-1], pts[i]
	v := a.Ms + (b.Ms-a.Ms)*(x-a.X)/(b.X-a.X)
	return math.Max(v, 0)
}
