package enginesim

import (
	"math"
	"time"
)

// MockerModel is the quadratic fit Dynamo's mocker ships (dynamo.md §7),
// kept for comparison with Dynamo (`--perf mocker`). It is not physical:
// prefill time depends only on the step's new tokens (a chunk costs the same
// after 0 or 400k tokens of context) and decode time only on the fraction of
// KV in use (the same for 1 or 256 sequences, so a bigger cache decodes
// faster). A step that prefills and decodes costs the sum. Times are in
// milliseconds.
type MockerModel struct {
	PrefillA, PrefillB, PrefillC float64 // ms = A·N² + B·N + C for N new tokens
	DecodeA, DecodeB, DecodeC    float64 // ms = A·u² + B·u + C for KV usage u
	DecodeFloorMs                float64
}

// DefaultMockerModel returns the mocker's polynomials.
func DefaultMockerModel() MockerModel {
	return MockerModel{
		PrefillA: 4.209989e-7, PrefillB: 1.518344e-2, PrefillC: 16.50142,
		DecodeA: -25.74, DecodeB: 54.01, DecodeC: 5.74,
		DecodeFloorMs: 1,
	}
}

var _ PerfModel = MockerModel{}

// StepTime is the prefill polynomial of the step's new tokens plus, when
// any request decodes, the decode polynomial of the KV usage.
func (p MockerModel) StepTime(b *Batch) time.Duration {
	var d time.Duration
	if n := float64(b.NewTokens()); n > 0 {
		d = ms(p.PrefillA*n*n + p.PrefillB*n + p.PrefillC)
	}
	if b.DecodeRequests > 0 {
		u := b.KVUsage
		d = saturatingAdd(d, ms(math.Max(p.DecodeA*u*u+p.DecodeB*u+p.DecodeC, p.DecodeFloorMs)))
	}
	return d
}
