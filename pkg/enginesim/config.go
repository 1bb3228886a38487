package enginesim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// Config configures one simulated engine. The zero value of every field means
// its default (see DefaultConfig).
type Config struct {
	WorkerID string

	BlockSize           int // tokens per KV block
	NumGPUBlocks        int // device KV capacity in blocks
	MaxNumSeqs          int // requests running at once
	MaxNumBatchedTokens int // tokens computed per step (prefill chunks + decodes)

	HostBlocks int // host (pinned CPU) tier capacity in blocks; 0 = no host tier
	DiskBlocks int // disk tier capacity in blocks; 0 = no disk tier

	TransferBandwidth     float64 // host↔device bytes/s per GPU; also used for Share imports
	DiskTransferBandwidth float64 // disk→device bytes/s per GPU

	// TensorParallelSize is the GPUs of the worker (1 when 0). Each holds
	// its share of a block's KV and has its own host, disk and network
	// link, so a transfer moves 1/TP of the bytes over each, in parallel.
	TensorParallelSize int

	// SharedPool, when set, is a KV store shared with other engines (a
	// Mooncake-like pool, package kvpool): blocks evicted from the engine's
	// last local tier are written to it, and a prompt prefix it holds beyond
	// what the engine holds itself is loaded from it at
	// PoolTransferBandwidth. nil = no shared pool.
	SharedPool SharedPool
	// PoolTransferBandwidth is shared pool→device bytes/s.
	PoolTransferBandwidth float64

	// Model is the served model: its KV bytes per token size transfers,
	// its MaxModelLen bounds requests.
	Model ModelConfig
	// Perf times the steps; nil = the default preset's roofline.
	Perf PerfModel

	// SpeedUp divides every simulated duration (2 = twice as fast as the
	// modelled hardware).
	SpeedUp float64

	// Vocab is the set of token ids generated text is drawn from. The shim
	// passes ids of common words from the frontend's tokenizer so responses
	// detokenize to words; the default is DefaultVocab.
	Vocab []uint32

	// OutputLenMin and OutputLenMax bound the natural answer length (the point
	// where the simulated model emits end-of-sequence) of a request that does
	// not set Request.OutputLen.
	OutputLenMin, OutputLenMax int

	// Seed makes runs reproducible: same seed, same requests in the same order
	// → same tokens, timings and events.
	Seed int64
}

// DefaultVocab returns the built-in output vocabulary: 256 consecutive ids
// starting at 1000, away from the special tokens at the bottom of common
// vocabularies.
func DefaultVocab() []uint32 {
	v := make([]uint32, 256)
	for i := range v {
		v[i] = 1000 + uint32(i)
	}
	return v
}

// DefaultConfig is the single place defaults live: a worker of the
// DefaultPreset (Llama-3.1-8B on one H100, see the package doc), its KV
// capacity in 16-token blocks.
func DefaultConfig() Config {
	p, err := LookupPreset(DefaultPreset)
	if err != nil {
		panic(err) // unreachable: the default is one of the presets
	}
	return Config{
		WorkerID:              "sim-0",
		BlockSize:             kvhash.DefaultBlockSize,
		NumGPUBlocks:          p.KVCapacityTokens() / kvhash.DefaultBlockSize,
		MaxNumSeqs:            256,
		MaxNumBatchedTokens:   8192,
		TransferBandwidth:     64e9,
		DiskTransferBandwidth: 8e9,
		PoolTransferBandwidth: 25e9,
		Model:                 p.Model,
		Perf:                  p.Roofline,
		SpeedUp:               1,
		Vocab:                 DefaultVocab(),
		OutputLenMin:          32,
		OutputLenMax:          256,
	}
}

// withDefaults fills every zero field from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.WorkerID == "" {
		c.WorkerID = d.WorkerID
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if c.NumGPUBlocks == 0 {
		c.NumGPUBlocks = d.NumGPUBlocks
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = d.MaxNumSeqs
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = d.MaxNumBatchedTokens
	}
	if c.TransferBandwidth == 0 {
		c.TransferBandwidth = d.TransferBandwidth
	}
	if c.DiskTransferBandwidth == 0 {
		c.DiskTransferBandwidth = d.DiskTransferBandwidth
	}
	if c.PoolTransferBandwidth == 0 {
		c.PoolTransferBandwidth = d.PoolTransferBandwidth
	}
	if c.Model == (ModelConfig{}) {
		c.Model = d.Model
	}
	if c.Perf == nil {
		c.Perf = d.Perf
	}
	if c.SpeedUp == 0 {
		c.SpeedUp = d.SpeedUp
	}
	if len(c.Vocab) == 0 {
		c.Vocab = d.Vocab
	}
	if c.OutputLenMin == 0 {
		c.OutputLenMin = d.OutputLenMin
	}
	if c.OutputLenMax == 0 {
		c.OutputLenMax = max(d.OutputLenMax, c.OutputLenMin)
	}
	return c
}

// MaxTierBlocks is the most blocks one tier of an engine holds.
const MaxTierBlocks = 1<<30 - 1

func (c Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.BlockSize > 0 && c.BlockSize <= 1024, "block size %d out of range (1..1024)", c.BlockSize)
	check(c.NumGPUBlocks > 0 && c.NumGPUBlocks <= MaxTierBlocks, "num GPU blocks %d out of range", c.NumGPUBlocks)
	// Token counts per request are int32 (see request).
	check(int64(c.NumGPUBlocks)*int64(c.BlockSize) < math.MaxInt32, "KV capacity of %d blocks × %d tokens exceeds 2^31 tokens", c.NumGPUBlocks, c.BlockSize)
	check(c.MaxNumSeqs > 0, "max num seqs %d must be positive", c.MaxNumSeqs)
	check(c.MaxNumBatchedTokens > 0, "max num batched tokens %d must be positive", c.MaxNumBatchedTokens)
	check(c.HostBlocks >= 0 && c.HostBlocks <= MaxTierBlocks, "host blocks %d out of range", c.HostBlocks)
	check(c.DiskBlocks >= 0 && c.DiskBlocks <= MaxTierBlocks, "disk blocks %d out of range", c.DiskBlocks)
	check(c.TransferBandwidth > 0, "transfer bandwidth must be positive")
	check(c.DiskTransferBandwidth > 0, "disk transfer bandwidth must be positive")
	check(c.PoolTransferBandwidth > 0, "pool transfer bandwidth must be positive")
	check(c.SpeedUp > 0, "speed-up %v must be positive", c.SpeedUp)
	check(c.TensorParallelSize >= 0, "tensor parallel size %d must not be negative", c.TensorParallelSize)
	check(c.Model.BytesPerToken() > 0, "model config gives %d KV bytes per token", c.Model.BytesPerToken())
	check(c.OutputLenMin > 0 && c.OutputLenMax >= c.OutputLenMin, "output length range [%d, %d] invalid", c.OutputLenMin, c.OutputLenMax)
	return errors.Join(errs...)
}

// scale applies the speed-up factor to a modelled duration.
func (c *Config) scale(d time.Duration) time.Duration {
	if d < 0 { // the sum of saturated parts overflowed
		d = math.MaxInt64
	}
	if c.SpeedUp == 1 {
		return d
	}
	if v := float64(d) / c.SpeedUp; v < math.MaxInt64 {
		return time.Duration(v)
	}
	return math.MaxInt64
}

// hasherFor hashes tokens with the default seed (tests and tools).
func (c Config) hasherFor(tokens []uint32) []kv.BlockHash {
	return kvhash.Hasher{BlockSize: c.BlockSize, Seed: kvhash.BaseSeed}.Blocks(tokens)
}
