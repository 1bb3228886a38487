package enginesim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// ServeBench is a load shaped like `vllm bench serve --dataset-name random
// --request-rate inf`: NumPrompts requests of random tokens (no prefix is
// shared), at most MaxConcurrency in flight, each with InputLen prompt and
// exactly OutputLen output tokens (ignore_eos), both drawn uniformly within
// ±RangeRatio of their value. It is how the presets are checked against
// published measurements (docs/simulator.md).
type ServeBench struct {
	NumPrompts, MaxConcurrency int
	InputLen, OutputLen        int
	RangeRatio                 float64
	Seed                       uint64
}

// ServeResult is what `vllm bench serve` reports, on simulated time.
type ServeResult struct {
	Duration               time.Duration
	OutputTokensPerS       float64
	MeanTTFT, MedianTTFT   time.Duration
	MeanTPOT, MedianTPOT   time.Duration // (end − first token) / (output − 1), per request
	MeanITL, MedianITL     time.Duration // every gap between two tokens
	Requests, OutputTokens int
}

// RunServeBench drives one engine with the load on virtual time: requests
// join at step boundaries, as a client's next request reaches the engine
// between two of its iterations.
func RunServeBench(cfg Config, b ServeBench) (ServeResult, error) {
	if b.NumPrompts <= 0 || b.MaxConcurrency <= 0 || b.InputLen <= 0 || b.OutputLen <= 0 || b.RangeRatio < 0 || b.RangeRatio >= 1 {
		return ServeResult{}, fmt.Errorf("enginesim: serve bench %+v out of range", b)
	}
	e, err := New(cfg)
	if err != nil {
		return ServeResult{}, err
	}
	rng := rand.New(rand.NewPCG(b.Seed, 0x5e47e))
	around := func(n int) int {
		lo, hi := int(float64(n)*(1-b.RangeRatio)), int(float64(n)*(1+b.RangeRatio))
		return max(lo+rng.IntN(hi-lo+1), 1)
	}
	type flight struct {
		sent, first, last time.Duration
		tokens            int
	}
	inflight := map[string]*flight{}
	var clock time.Duration
	var ttft, tpot, itl []time.Duration
	sent, outTokens := 0, 0
	send := func() error {
		id := strconv.Itoa(sent)
		prompt := make([]uint32, around(b.InputLen))
		for i := range prompt {
			prompt[i] = rng.Uint32() // random tokens: no two prompts share a block
		}
		out := around(b.OutputLen)
		sent++
		inflight[id] = &flight{sent: clock}
		return e.Add(Request{ID: id, Prompt: prompt, MaxTokens: out, OutputLen: out, IgnoreEOS: true})
	}
	for sent < min(b.MaxConcurrency, b.NumPrompts) {
		if err := send(); err != nil {
			return ServeResult{}, err
		}
	}
	for e.HasWork() {
		res := e.Step()
		clock += res.Duration
		finished := 0
		for _, o := range res.Outputs {
			f := inflight[o.RequestID]
			f.tokens++
			outTokens++
			if o.First {
				f.first = clock
				ttft = append(ttft, clock-f.sent)
			} else {
				itl = append(itl, clock-f.last)
			}
			f.last = clock
			if o.Finish != FinishNone {
				if f.tokens > 1 {
					tpot = append(tpot, (clock-f.first)/time.Duration(f.tokens-1))
				}
				delete(inflight, o.RequestID)
				finished++
			}
		}
		for ; finished > 0 && sent < b.NumPrompts; finished-- {
			if err := send(); err != nil {
				return ServeResult{}, err
			}
		}
	}
	r := ServeResult{Duration: clock, Requests: sent, OutputTokens: outTokens}
	if clock > 0 {
		r.OutputTokensPerS = float64(outTokens) / clock.Seconds()
	}
	r.MeanTTFT, r.MedianTTFT = meanMedian(ttft)
	r.MeanTPOT, r.MedianTPOT = meanMedian(tpot)
	r.MeanITL, r.MedianITL = meanMedian(itl)
	return r, nil
}

func meanMedian(xs []time.Duration) (mean, median time.Duration) {
	if len(xs) == 0 {
		return 0, 0
	}
	var sum time.Duration
	for _, x := range xs {
		sum += x
	}
	slices.Sort(xs)
	median = xs[len(xs)/2]
	if len(xs)%2 == 0 {
		median = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return sum / time.Duration(len(xs)), median
}
