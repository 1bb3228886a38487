package enginesim

import (
	"fmt"
	"strings"
	"time"

	"switchyard.dev/pkg/kvhash"
)

// Preset is a named (model, GPU, parallelism) setup of the roofline model,
// selected with --perf. docs/simulator.md gives the source of every number
// and checks each preset against published measurements of the real engine.
type Preset struct {
	Name string
	Roofline
}

// GPUs, from NVIDIA's datasheets (dense tensor FLOP/s; memory as the
// driver reports it).
var (
	H100SXM = GPU{
		Name:                  "h100-sxm",
		MemoryBytes:           81559 * mib, // 80 GB HBM3; nvidia-smi reports 81,559 MiB
		MemoryBandwidth:       3.35e12,
		BF16FLOPS:             989.4e12,
		FP8FLOPS:              1978.9e12,
		InterconnectBandwidth: 450e9, // NVLink 4: 900 GB/s bidirectional
	}
	H200 = GPU{
		Name:                  "h200",
		MemoryBytes:           143771 * mib, // 141 GB HBM3e; nvidia-smi reports 143,771 MiB
		MemoryBandwidth:       4.8e12,
		BF16FLOPS:             989.4e12,
		FP8FLOPS:              1978.9e12,
		InterconnectBandwidth: 450e9,
	}
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// Models, from their config.json.
var (
	Llama31_8B = ModelConfig{
		Name: "llama-3.1-8b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128,
		Vocab: 128256, TotalParams: 8.03e9, ActiveParams: 8.03e9,
		WeightBytes: 2, KVDTypeSize: 2, MaxModelLen: 131072,
	}
	Qwen3Coder30BA3B = ModelConfig{
		Name: "qwen3-coder-30b-a3b", Layers: 48, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128,
		Vocab: 151936, TotalParams: 30.5e9, ActiveParams: 3.3e9, Experts: 128, ExpertsPerToken: 8,
		WeightBytes: 2, KVDTypeSize: 2, MaxModelLen: 262144,
	}
	MiniMaxM2 = ModelConfig{
		Name: "minimax-m2", Layers: 62, Hidden: 3072, Heads: 48, KVHeads: 8, HeadDim: 128,
		Vocab: 200064, TotalParams: 230e9, ActiveParams: 10e9, Experts: 256, ExpertsPerToken: 8,
		WeightBytes: 1, KVDTypeSize: 2, MaxModelLen: 196608,
	}
)

// VLLMHopper is what vLLM reaches on Hopper GPUs, fitted to the published
// measurements docs/simulator.md lists as the calibration set.
var VLLMHopper = Efficiency{
	Compute:          0.5,
	Attention:        0.7,
	Memory:           0.9,
	StepOverhead:     1400 * time.Microsecond,
	AllReduceLatency: 10 * time.Microsecond,
}

// vLLM's defaults for the memory split.
const (
	defaultGPUMemoryUtilization = 0.9
	defaultActivationReserve    = 3 * gib
)

func preset(m ModelConfig, g GPU, tp int) Preset {
	name := m.Name
	if tp > 1 {
		name += fmt.Sprintf("-tp%d", tp)
	}
	return Preset{Name: name + "@" + g.Name, Roofline: Roofline{
		Model: m, GPU: g, TP: tp, Efficiency: VLLMHopper,
		GPUMemoryUtilization: defaultGPUMemoryUtilization, ActivationReserve: defaultActivationReserve,
	}}
}

// Presets lists every preset: Llama-3.1-8B on one H100 (the default), the
// article's RL rollout setup (Qwen3-Coder-30B-A3B on one H200) and its
// SWE-bench setup (MiniMax-M2 on four H100s, tensor-parallel).
func Presets() []Preset {
	m2 := preset(MiniMaxM2, H100SXM, 4)
	m2.Efficiency.MoELayerOverhead = miniMaxMoELayerOverhead
	return []Preset{
		preset(Llama31_8B, H100SXM, 1),
		preset(Qwen3Coder30BA3B, H200, 1),
		m2,
	}
}

// miniMaxMoELayerOverhead is fitted to MiniMax-M2's published TPOT at
// concurrency 10 on four H100s (vLLM's FP8 block-quantized fused MoE):
// the traffic and FLOPs of a decode step explain about half of it.
const miniMaxMoELayerOverhead = 125 * time.Microsecond

// DefaultPreset is the preset DefaultConfig models.
const DefaultPreset = "llama-3.1-8b@h100-sxm"

// LookupPreset finds a preset by name.
func LookupPreset(name string) (Preset, error) {
	for _, p := range Presets() {
		if p.Name == name {
			return p, nil
		}
	}
	return Preset{}, fmt.Errorf("enginesim: unknown perf preset %q (want one of %s)", name, strings.Join(presetNames(), ", "))
}

func presetNames() []string {
	var names []string
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	return names
}

// MockerPerf is the --perf name of MockerModel.
const MockerPerf = "mocker"

// Apply configures an engine as the preset's worker: its model, its step
// times, its GPUs, and a device KV cache of the preset's capacity in blocks
// of c.BlockSize tokens (the default block size when unset).
func (p Preset) Apply(c *Config) {
	bs := c.BlockSize
	if bs <= 0 {
		bs = kvhash.DefaultBlockSize
	}
	c.Model = p.Model
	c.Perf = p.Roofline
	c.NumGPUBlocks = p.KVCapacityTokens() / bs
	c.TensorParallelSize = p.TP
}

// ResolvePerf turns a --perf value into a step-time model: "mocker", a
// preset's name, or the path of a JSON table (ParseTableModel), read with
// readFile (the caller's I/O). It also returns the preset when the value
// names one: its KV capacity sizes the worker (Preset.Apply).
func ResolvePerf(spec string, readFile func(string) ([]byte, error)) (PerfModel, *Preset, error) {
	if spec == MockerPerf {
		return DefaultMockerModel(), nil, nil
	}
	if p, err := LookupPreset(spec); err == nil {
		return p.Roofline, &p, nil
	} else if !strings.HasSuffix(spec, ".json") {
		return nil, nil, fmt.Errorf("enginesim: unknown perf model %q (want %s, a preset: %s, or a JSON table's path)", spec, MockerPerf, strings.Join(presetNames(), ", "))
	}
	b, err := readFile(spec)
	if err != nil {
		return nil, nil, err
	}
	t, err := ParseTableModel(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec, err)
	}
	return t, nil, nil
}
