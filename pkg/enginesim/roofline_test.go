package enginesim

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func prefillStep(m PerfModel, newTokens, prefix int) time.Duration {
	return m.StepTime(&Batch{Prefill: []PrefillChunk{{NewTokens: newTokens, PrefixTokens: prefix}}})
}

func decodeStep(m PerfModel, batch, contextPerSeq int) time.Duration {
	return m.StepTime(&Batch{DecodeRequests: batch, DecodeContextTokens: batch * contextPerSeq})
}

// Prefill cost rises with the prefix at fixed new tokens: attention reads
// and multiplies against every earlier token.
func TestRooflinePrefillRisesWithPrefix(t *testing.T) {
	for _, p := range Presets() {
		for _, n := range []int{1, 64, 512, 8192} {
			prev := time.Duration(-1)
			for prefix := 0; prefix <= 1<<20; prefix = max(2*prefix, 1024) {
				d := prefillStep(p.Roofline, n, prefix)
				if d <= prev {
					t.Errorf("%s: %d new tokens after %d: %v, not above %v", p.Name, n, prefix, d, prev)
				}
				prev = d
			}
		}
	}
}

// Decode cost rises with the batch at a fixed context per sequence, and with
// the context at a fixed batch.
func TestRooflineDecodeRisesWithBatchAndContext(t *testing.T) {
	for _, p := range Presets() {
		for _, ctx := range []int{1024, 32768, 131072} {
			prev := time.Duration(-1)
			for bs := 1; bs <= 256; bs *= 2 {
				d := decodeStep(p.Roofline, bs, ctx)
				if d <= prev {
					t.Errorf("%s: batch %d at %d context: %v, not above %v", p.Name, bs, ctx, d, prev)
				}
				prev = d
			}
		}
		for _, bs := range []int{1, 16, 128} {
			prev := time.Duration(-1)
			for ctx := 1024; ctx <= 1<<20; ctx *= 2 {
				d := decodeStep(p.Roofline, bs, ctx)
				if d <= prev {
					t.Errorf("%s: batch %d at %d context: %v, not above %v", p.Name, bs, ctx, d, prev)
				}
				prev = d
			}
		}
	}
}

// A step's cost does not depend on how large the cache is: the same load on
// an engine with twice the KV capacity decodes exactly as fast, step for
// step.
func TestDoublingCapacityDoesNotSpeedUpDecode(t *testing.T) {
	run := func(blocks int) []time.Duration {
		e := mustNew(t, Config{BlockSize: 16, NumGPUBlocks: blocks, Seed: 3})
		for i := range 8 {
			must(t, e.Add(Request{ID: fmt.Sprint(i), Prompt: seq(i*10_000, 3000+500*i), MaxTokens: 40, IgnoreEOS: true}))
		}
		var steps []time.Duration
		for e.HasWork() {
			steps = append(steps, e.Step().Duration)
		}
		return steps
	}
	small, large := run(4096), run(8192)
	if len(small) != len(large) {
		t.Fatalf("%d steps vs %d", len(small), len(large))
	}
	for i := range small {
		if large[i] < small[i] {
			t.Fatalf("step %d: %v with twice the capacity, %v without", i, large[i], small[i])
		}
	}
	// The mocker's decode polynomial, by contrast, reads KV usage: the
	// bigger cache looks emptier and decodes faster.
	b := Batch{DecodeRequests: 8, DecodeContextTokens: 8 * 5000, KVUsage: 0.4}
	half := b
	half.KVUsage /= 2
	if m := DefaultMockerModel(); m.StepTime(&half) >= m.StepTime(&b) {
		t.Fatal("the mocker was expected to depend on KV usage")
	}
}

func TestRooflineParts(t *testing.T) {
	llama, err := LookupPreset(DefaultPreset)
	if err != nil {
		t.Fatal(err)
	}
	r := llama.Roofline
	// Decoding one sequence of a short context is memory-bound: the
	// weights (less the input embedding) read once, at the efficiency.
	weights := (8.03e9 - 128256*4096.0) * 2
	want := r.Efficiency.StepOverhead + seconds(weights/(r.GPU.MemoryBandwidth*r.Efficiency.Memory))
	if got := decodeStep(r, 1, 1); math.Abs(float64(got-want)) > float64(20*time.Microsecond) {
		t.Errorf("batch-1 decode %v, want ≈ %v", got, want)
	}
	// A long prefill chunk is compute-bound and grows with its square.
	if a, b := prefillStep(r, 65536, 0), prefillStep(r, 131072, 0); float64(b) < 2.2*float64(a) {
		t.Errorf("prefill of 128k %v is not superlinear in that of 64k %v", b, a)
	}
	// A mixed step costs more than either part, less than both apart (the
	// weights are read once).
	mixed := r.StepTime(&Batch{Prefill: []PrefillChunk{{NewTokens: 512}}, DecodeRequests: 32, DecodeContextTokens: 32 * 4096})
	p, d := prefillStep(r, 512, 0), decodeStep(r, 32, 4096)
	if mixed <= max(p, d) || mixed >= p+d {
		t.Errorf("mixed step %v, prefill %v, decode %v", mixed, p, d)
	}
	if r.StepTime(&Batch{}) != 0 {
		t.Error("an empty step costs time")
	}
}

// A mixture of experts reads only the experts a step's tokens chose: one
// token reads about the active weights, a big batch all of them.
func TestRooflineExpertWeightsRead(t *testing.T) {
	q, err := LookupPreset("qwen3-coder-30b-a3b@h200")
	if err != nil {
		t.Fatal(err)
	}
	m := q.Model
	one := q.weightBytesRead(1) / m.WeightBytes
	if want := m.ActiveParams - q.Model.embeddingParams(); math.Abs(one-want)/want > 0.01 {
		t.Errorf("one token reads %.3g params, want ≈ %.3g", one, want)
	}
	all := q.weightBytesRead(4096) / m.WeightBytes
	if want := m.TotalParams - q.Model.embeddingParams(); math.Abs(all-want)/want > 0.001 {
		t.Errorf("4096 tokens read %.3g params, want ≈ %.3g", all, want)
	}
}

func TestKVCapacityFromMemory(t *testing.T) {
	for _, tc := range []struct {
		preset   string
		min, max int // tokens: a sanity range, the exact figures are in docs/simulator.md
	}{
		{"llama-3.1-8b@h100-sxm", 400_000, 480_000},
		{"qwen3-coder-30b-a3b@h200", 600_000, 800_000},
		{"minimax-m2-tp4@h100-sxm", 150_000, 300_000},
	} {
		p, err := LookupPreset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.preset, err)
		}
		if got := p.KVCapacityTokens(); got < tc.min || got > tc.max {
			t.Errorf("%s: %d KV tokens, want in [%d, %d]", tc.preset, got, tc.min, tc.max)
		}
	}
	// Weights that do not fit leave no KV.
	p, _ := LookupPreset("minimax-m2-tp4@h100-sxm")
	p.TP = 1
	if got := p.KVCapacityTokens(); got != 0 {
		t.Errorf("MiniMax-M2 on one H100: %d KV tokens", got)
	}
	var c Config
	p, _ = LookupPreset(DefaultPreset)
	p.Apply(&c)
	if c.NumGPUBlocks*16 > p.KVCapacityTokens() || c.NumGPUBlocks*16+16 <= p.KVCapacityTokens() {
		t.Errorf("Apply: %d blocks of 16 for %d tokens", c.NumGPUBlocks, p.KVCapacityTokens())
	}
}

func TestLookupPreset(t *testing.T) {
	for _, p := range Presets() {
		got, err := LookupPreset(p.Name)
		if err != nil || got.Name != p.Name {
			t.Errorf("%s: %v", p.Name, err)
		}
		if _, pre, err := ResolvePerf(p.Name, nil); err != nil || pre == nil || pre.Name != p.Name {
			t.Errorf("ResolvePerf(%s): %v, %v", p.Name, pre, err)
		}
	}
	if _, pre, err := ResolvePerf(MockerPerf, nil); err != nil || pre != nil {
		t.Errorf("ResolvePerf(mocker): %v, %v", pre, err)
	}
	if _, err := LookupPreset(MockerPerf); err == nil || strings.Contains(err.Error(), MockerPerf+")") {
		t.Errorf("LookupPreset(mocker): %v; want an error that does not offer mocker, which is no preset", err)
	}
	if _, _, err := ResolvePerf("gpt-5@tpu", nil); err == nil || !strings.Contains(err.Error(), "want mocker, a preset: ") {
		t.Errorf("ResolvePerf of an unknown name: %v", err)
	}
}
