package enginesim

import (
	"fmt"
	"time"
)

// Metric names a figure `vllm bench` reports.
type Metric string

const (
	MetricMedianITL  Metric = "median_itl_ms"
	MetricMeanTPOT   Metric = "mean_tpot_ms"
	MetricMedianTTFT Metric = "median_ttft_ms"
	MetricMeanTTFT   Metric = "mean_ttft_ms"
	MetricOutputTokS Metric = "output_tok_s"
	MetricDuration   Metric = "duration_ms" // the whole load (vllm bench latency: one batch)
)

// Published is one published measurement of a real engine that a preset is
// checked against. docs/simulator.md lists them with the model's figure and
// the ratio (`switchyard perf check`).
type Published struct {
	Preset string
	// GPU is the measurement's GPU when it is not the preset's (the model is
	// then evaluated on it); the zero value means the preset's.
	GPU    GPU
	Source string // where it is published
	Setup  string // engine, version and what differs from the load
	Load   ServeBench
	Metric Metric
	Value  float64
	// Fit marks the measurements the efficiencies were fitted to: they check
	// the fit, not the model; the others are out of sample.
	Fit bool
}

const (
	srcFP8KV   = "vLLM blog, The State of FP8 KV-Cache and Attention Quantization in vLLM, 2026-04-22, fig. 2 and table (https://blog.vllm.ai/2026/04/22/fp8-kvcache.html)"
	srcCI      = "vLLM performance-benchmark CI, latency_llama8B_tp1 (https://buildkite.com/vllm/performance-benchmark/builds/9515)"
	srcQwenMoE = "vllm-project/vllm PR #23151, tuned fused_moe configs for Qwen3-30B-A3B, the run before tuning (https://github.com/vllm-project/vllm/pull/23151)"
	srcM2MoE   = "vllm-project/vllm PR #28200 and vllm-project/recipes PR #112, MiniMax-M2 on H100, DeepGEMM off, tuned fused_moe (https://github.com/vllm-project/vllm/pull/28200)"
	srcM25     = "SemiAnalysisAI/InferenceX PR #832, MiniMax-M2.5, the same architecture as M2 (https://github.com/SemiAnalysisAI/InferenceX/pull/832)"
)

// PublishedChecks returns every published measurement the presets are
// checked against.
func PublishedChecks() []Published {
	llama := "llama-3.1-8b@h100-sxm"
	qwen := "qwen3-coder-30b-a3b@h200"
	m2 := "minimax-m2-tp4@h100-sxm"
	batch1 := func(in int) ServeBench {
		return ServeBench{NumPrompts: 3, MaxConcurrency: 1, InputLen: in, OutputLen: 128}
	}
	itl := func(in int) float64 { return 4.37e-5*float64(in) + 6.44 } // the post's fitted line
	fp8kv := "vLLM v0.19.1, FlashAttention-3, bf16 KV, concurrency 1, 128 output tokens"
	under := ServeBench{NumPrompts: 150, MaxConcurrency: 8, InputLen: 20_000, OutputLen: 2_000, RangeRatio: 0.15, Seed: 1}
	q1 := ServeBench{NumPrompts: 100, MaxConcurrency: 10, InputLen: 2048, OutputLen: 1024, Seed: 1}
	m4 := ServeBench{NumPrompts: 40, MaxConcurrency: 4, InputLen: 1024, OutputLen: 1024, Seed: 1}
	return []Published{
		{Preset: llama, Source: srcFP8KV, Setup: fp8kv, Load: batch1(1024), Metric: MetricMedianITL, Value: itl(1024), Fit: true},
		{Preset: llama, Source: srcFP8KV, Setup: fp8kv, Load: batch1(65536), Metric: MetricMedianITL, Value: itl(65536), Fit: true},
		{Preset: llama, Source: srcFP8KV, Setup: fp8kv, Load: batch1(131072 - 128), Metric: MetricMedianITL, Value: itl(131072), Fit: true},
		{Preset: llama, Source: srcFP8KV, Setup: fp8kv + " (TTFT read off the figure)", Load: batch1(32768), Metric: MetricMedianTTFT, Value: 1330, Fit: true},
		{Preset: llama, Source: srcFP8KV, Setup: fp8kv + " (TTFT read off the figure)", Load: batch1(65536), Metric: MetricMedianTTFT, Value: 3600},
		{Preset: llama, Source: srcFP8KV, Setup: fp8kv + " (TTFT read off the figure)", Load: batch1(131072 - 128), Metric: MetricMedianTTFT, Value: 10100, Fit: true},
		{Preset: llama, Source: srcFP8KV, Setup: "vLLM v0.19.1, bf16 KV, 150 requests at concurrency 8, ~20k in / ~2k out ±15 %", Load: under, Metric: MetricMedianTTFT, Value: 763.6},
		{Preset: llama, Source: srcFP8KV, Setup: "vLLM v0.19.1, bf16 KV, 150 requests at concurrency 8, ~20k in / ~2k out ±15 %", Load: under, Metric: MetricMedianITL, Value: 15.18},
		{Preset: llama, Source: srcFP8KV, Setup: "vLLM v0.19.1, bf16 KV, 150 requests at concurrency 8, ~20k in / ~2k out ±15 %", Load: under, Metric: MetricOutputTokS, Value: 450.3},
		{Preset: llama, GPU: H200, Source: srcCI, Setup: "vLLM (version not stated), on an H200, batch of 8, 32 in / 128 out, mean latency", Load: ServeBench{NumPrompts: 8, MaxConcurrency: 8, InputLen: 32, OutputLen: 128}, Metric: MetricDuration, Value: 833.421},

		{Preset: qwen, GPU: H100SXM, Source: srcQwenMoE, Setup: "Qwen3-30B-A3B (same shape), vLLM ≈0.10, H100 TP1 bf16 (no H200 measurement found), random 2048/1024, concurrency 10, 100 prompts", Load: q1, Metric: MetricMeanTPOT, Value: 13.18},
		{Preset: qwen, GPU: H100SXM, Source: srcQwenMoE, Setup: "as above", Load: q1, Metric: MetricMeanTTFT, Value: 267.22},
		{Preset: qwen, GPU: H100SXM, Source: srcQwenMoE, Setup: "as above", Load: q1, Metric: MetricOutputTokS, Value: 739.79},

		{Preset: m2, Source: srcM2MoE, Setup: "vLLM (Nov 2025), FP8 block-quantized, TP4, random 2048/1024, concurrency 10, 100 prompts", Load: q1, Metric: MetricMeanTPOT, Value: 16.39, Fit: true},
		{Preset: m2, Source: srcM2MoE, Setup: "as above", Load: q1, Metric: MetricMeanTTFT, Value: 258.76},
		{Preset: m2, Source: srcM2MoE, Setup: "as above", Load: q1, Metric: MetricOutputTokS, Value: 566.84},
		{Preset: m2, Source: srcM25, Setup: "vLLM v0.16.0, FP8, TP4/EP4 (expert parallel, modelled as TP4), random 1k/1k, concurrency 4", Load: m4, Metric: MetricMeanTPOT, Value: 13.34},
		{Preset: m2, Source: srcM25, Setup: "as above", Load: m4, Metric: MetricMeanTTFT, Value: 129.8},
	}
}

// Model runs the check's load on a simulated engine of its preset (on the
// measurement's GPU) and returns the model's figure of its metric.
func (p Published) Model() (float64, error) {
	pr, err := LookupPreset(p.Preset)
	if err != nil {
		return 0, err
	}
	if p.GPU.Name != "" {
		pr.GPU = p.GPU
	}
	var c Config
	pr.Apply(&c)
	res, err := RunServeBench(c, p.Load)
	if err != nil {
		return 0, err
	}
	msOf := func(d time.Duration) float64 { return float64(d) / 1e6 }
	switch p.Metric {
	case MetricMedianITL:
		return msOf(res.MedianITL), nil
	case MetricMeanTPOT:
		return msOf(res.MeanTPOT), nil
	case MetricMedianTTFT:
		return msOf(res.MedianTTFT), nil
	case MetricMeanTTFT:
		return msOf(res.MeanTTFT), nil
	case MetricOutputTokS:
		return res.OutputTokensPerS, nil
	case MetricDuration:
		return msOf(res.Duration), nil
	}
	return 0, fmt.Errorf("enginesim: unknown metric %q", p.Metric)
}
