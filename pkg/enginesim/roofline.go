package enginesim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ModelConfig is the shape of the served model: what its weights weigh,
// what a token costs to compute and what its KV cache takes (the numbers of
// the model's config.json).
type ModelConfig struct {
	Name    string
	Layers  int
	Hidden  int // hidden size
	Heads   int // attention (query) heads
	KVHeads int // key/value heads (grouped-query attention)
	HeadDim int
	Vocab   int
	// TiedEmbeddings: the output projection is the input embedding.
	TiedEmbeddings bool
	// TotalParams is every weight; ActiveParams the weights one token
	// passes through (all of a dense model; the shared part and
	// ExpertsPerToken of Experts routed experts of a mixture of experts).
	// Both include the embedding and the output projection.
	TotalParams, ActiveParams float64
	// Experts and ExpertsPerToken describe a mixture of experts (0 = dense).
	Experts, ExpertsPerToken int
	// WeightBytes is bytes per weight (2 for bf16, 1 for fp8).
	WeightBytes float64
	// KVDTypeSize is bytes per KV cache element (2 for bf16/fp16, 1 for
	// fp8).
	KVDTypeSize int
	// MaxModelLen is the longest sequence (prompt plus output) the model
	// serves; 0 = no limit beyond the KV capacity.
	MaxModelLen int
}

// BytesPerToken is the KV footprint of one token on the whole worker: keys
// and values for every layer.
func (m ModelConfig) BytesPerToken() int64 {
	return int64(m.Layers) * 2 * int64(m.KVHeads) * int64(m.HeadDim) * int64(m.KVDTypeSize)
}

// kvBytesPerTokenPerGPU is one GPU's share of a token's KV under tensor
// parallelism: KV heads are split across ranks, and replicated when there
// are fewer heads than ranks.
func (m ModelConfig) kvBytesPerTokenPerGPU(tp int) float64 {
	heads := max(ceilDiv(m.KVHeads, tp), 1)
	return float64(m.Layers) * 2 * float64(heads) * float64(m.HeadDim) * float64(m.KVDTypeSize)
}

// embeddingParams is the input embedding table, which a forward pass only
// gathers rows from (never read in full, never multiplied).
func (m ModelConfig) embeddingParams() float64 {
	if m.TiedEmbeddings {
		return 0 // the table is read as the output projection
	}
	return float64(m.Vocab) * float64(m.Hidden)
}

// expertParams is the weight of all routed experts together: the part of
// TotalParams of which a token uses ExpertsPerToken/Experts.
func (m ModelConfig) expertParams() float64 {
	if m.Experts == 0 || m.ExpertsPerToken >= m.Experts {
		return 0
	}
	frac := float64(m.ExpertsPerToken) / float64(m.Experts)
	return (m.TotalParams - m.ActiveParams) / (1 - frac)
}

// GPU is one accelerator's datasheet figures.
type GPU struct {
	Name string
	// MemoryBytes is device memory as the driver reports it (what vLLM's
	// gpu_memory_utilization is a fraction of).
	MemoryBytes float64
	// MemoryBandwidth is HBM bytes/s.
	MemoryBandwidth float64
	// BF16FLOPS and FP8FLOPS are dense tensor-core FLOP/s.
	BF16FLOPS, FP8FLOPS float64
	// InterconnectBandwidth is GPU-to-GPU bytes/s in one direction
	// (NVLink), for tensor-parallel all-reduces.
	InterconnectBandwidth float64
}

// Efficiency says how much of the datasheet a real engine gets, and what a
// step costs besides its kernels.
type Efficiency struct {
	// Compute is the fraction of peak FLOP/s the GEMMs reach.
	Compute float64
	// Attention is the fraction of peak FLOP/s prefill attention reaches.
	Attention float64
	// Memory is the fraction of HBM bandwidth weight and KV reads reach.
	Memory float64
	// StepOverhead is the fixed cost of a step (scheduling, launches,
	// sampling).
	StepOverhead time.Duration
	// AllReduceLatency is the fixed cost of one tensor-parallel all-reduce.
	AllReduceLatency time.Duration
	// MoELayerOverhead is a fixed cost per mixture-of-experts layer per
	// step beyond its traffic and FLOPs (routing, token permutation,
	// grouped-GEMM launches and tiles mostly empty at small batches).
	MoELayerOverhead time.Duration
}

// Roofline is a physical step-time model: each part of a step is as slow as
// the slower of its compute and its memory traffic on the GPU
// (docs/simulator.md derives it and checks the presets against published
// measurements).
//
//   - Linear layers: 2·active params FLOPs per token computed (prefill and
//     decode tokens together), and the weights read once per step (for a
//     mixture of experts, the experts the step's tokens touch).
//   - Prefill attention: causal, 4·layers·heads·head_dim FLOPs per
//     (query, key) pair over prefix + new tokens; the prefix's KV is read
//     and the new KV written.
//   - Decode attention: the same FLOPs per (new token, context token) pair;
//     every decoding sequence's context KV is read.
//   - Tensor parallelism divides the work over TP GPUs and adds two
//     all-reduces of the step's activations per layer.
//
// The parts run one after the other (vLLM runs one forward pass over the
// mixed batch), so their times add, plus a fixed step overhead.
type Roofline struct {
	Model ModelConfig
	GPU   GPU
	// TP is the tensor-parallel degree: GPUs per worker.
	TP         int
	Efficiency Efficiency
	// GPUMemoryUtilization is vLLM's gpu_memory_utilization: the fraction
	// of device memory the engine may use for weights, activations and KV.
	GPUMemoryUtilization float64
	// ActivationReserve is bytes per GPU kept for activations, CUDA graphs
	// and communication buffers (what vLLM's profiling run measures).
	ActivationReserve float64
}

var _ PerfModel = Roofline{}

// Validate reports a model that cannot produce times or a capacity.
func (r Roofline) Validate() error {
	m, g, e := r.Model, r.GPU, r.Efficiency
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(m.Layers > 0 && m.Hidden > 0 && m.Heads > 0 && m.KVHeads > 0 && m.HeadDim > 0 && m.Vocab > 0, "model shape must be positive")
	check(m.ActiveParams > 0 && m.TotalParams >= m.ActiveParams, "params: total %v, active %v", m.TotalParams, m.ActiveParams)
	check(m.Experts >= 0 && m.ExpertsPerToken >= 0 && m.ExpertsPerToken <= m.Experts, "experts %d, per token %d", m.Experts, m.ExpertsPerToken)
	check(m.WeightBytes > 0 && m.KVDTypeSize > 0, "dtype sizes must be positive")
	check(g.MemoryBytes > 0 && g.MemoryBandwidth > 0 && g.BF16FLOPS > 0 && g.FP8FLOPS > 0, "GPU %q figures must be positive", g.Name)
	check(r.TP >= 1, "tensor parallelism %d", r.TP)
	check(r.TP == 1 || g.InterconnectBandwidth > 0, "tensor parallelism needs an interconnect bandwidth")
	check(e.Compute > 0 && e.Compute <= 1 && e.Attention > 0 && e.Attention <= 1 && e.Memory > 0 && e.Memory <= 1, "efficiencies must be in (0, 1]")
	check(e.StepOverhead >= 0 && e.AllReduceLatency >= 0 && e.MoELayerOverhead >= 0, "overheads must not be negative")
	check(r.GPUMemoryUtilization > 0 && r.GPUMemoryUtilization <= 1, "gpu memory utilization %v", r.GPUMemoryUtilization)
	check(r.ActivationReserve >= 0, "activation reserve must not be negative")
	return errors.Join(errs...)
}

// WeightBytesPerGPU is one GPU's share of the weights.
func (r Roofline) WeightBytesPerGPU() float64 {
	return r.Model.TotalParams * r.Model.WeightBytes / float64(r.TP)
}

// KVCapacityTokens is the worker's KV capacity as vLLM sizes it: device
// memory × utilization, less the weights and the activation reserve, over
// each GPU's share of a token's KV. 0 when the weights do not fit.
func (r Roofline) KVCapacityTokens() int {
	free := r.GPU.MemoryBytes*r.GPUMemoryUtilization - r.WeightBytesPerGPU() - r.ActivationReserve
	if free <= 0 {
		return 0
	}
	return int(math.Min(free/r.Model.kvBytesPerTokenPerGPU(r.TP), math.MaxInt32/2))
}

// gemmFLOPS is the peak the linear layers run at: FP8 tensor cores for FP8
// weights (vLLM's W8A8), BF16 otherwise.
func (r Roofline) gemmFLOPS() float64 {
	if r.Model.WeightBytes <= 1 {
		return r.GPU.FP8FLOPS
	}
	return r.GPU.BF16FLOPS
}

// StepTime implements PerfModel.
func (r Roofline) StepTime(b *Batch) time.Duration {
	newTokens := b.NewTokens()
	tokens := float64(newTokens + b.DecodeRequests)
	if tokens == 0 {
		return 0
	}
	m, g, e := &r.Model, &r.GPU, &r.Efficiency
	tp := float64(r.TP)
	compute := r.gemmFLOPS() * e.Compute * tp
	attnCompute := g.BF16FLOPS * e.Attention * tp
	bandwidth := g.MemoryBandwidth * e.Memory * tp
	kvPerToken := m.kvBytesPerTokenPerGPU(r.TP) * tp // bytes over all ranks

	// Linear layers. The output projection runs only for the tokens that
	// are sampled: decodes and (at most) one per prefill chunk.
	head := float64(m.Vocab) * float64(m.Hidden)
	body := m.ActiveParams - head - m.embeddingParams()
	sampled := float64(b.DecodeRequests + len(b.Prefill))
	linearFLOPs := 2*body*tokens + 2*head*sampled
	linearBytes := r.weightBytesRead(tokens)
	t := math.Max(linearFLOPs/compute, linearBytes/bandwidth)

	// Attention: 2·head_dim FLOPs for QKᵀ and as many for PV, per head,
	// layer and (query, key) pair.
	perPair := 4 * float64(m.Layers) * float64(m.Heads) * float64(m.HeadDim)
	var pairs, kvTokens float64
	for _, c := range b.Prefill {
		n, p := float64(c.NewTokens), float64(c.PrefixTokens)
		pairs += n*p + n*(n+1)/2
		kvTokens += p + n // read the prefix, write the new tokens
	}
	if pairs > 0 {
		t += math.Max(perPair*pairs/attnCompute, kvTokens*kvPerToken/bandwidth)
	}
	if b.DecodeRequests > 0 {
		ctx := float64(b.DecodeContextTokens)
		t += math.Max(perPair*ctx/attnCompute, ctx*kvPerToken/bandwidth)
	}

	if m.Experts > 0 {
		t += float64(m.Layers) * e.MoELayerOverhead.Seconds()
	}

	// Two all-reduces of the activations (bf16) per layer.
	if r.TP > 1 {
		msg := tokens * float64(m.Hidden) * 2
		ring := 2 * (tp - 1) / tp * msg / g.InterconnectBandwidth
		t += 2 * float64(m.Layers) * (e.AllReduceLatency.Seconds() + ring)
	}
	return saturatingAdd(e.StepOverhead, seconds(t))
}

// weightBytesRead is the weight traffic of a step of n tokens: everything
// but the input embedding, except the routed experts no token chose. With
// top-k routing spread evenly over E experts, a layer's expert stays idle
// for n tokens with probability (1 − k/E)^n.
func (r Roofline) weightBytesRead(n float64) float64 {
	m := &r.Model
	all := m.TotalParams - m.embeddingParams()
	if ex := m.expertParams(); ex > 0 {
		idle := math.Pow(1-float64(m.ExpertsPerToken)/float64(m.Experts), n)
		all -= ex * idle
	}
	return all * m.WeightBytes
}
