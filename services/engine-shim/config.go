package engineshim

import (
	"flag"
	"os"
	"strings"
	"time"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/services/engine-shim/adapter"
)

// Config configures one engine shim.
type Config struct {
	// Engine is "sim" (the simulated engine), "vllm" or "sglang" (a real
	// engine beside the shim, see Adapter and docs/deploy-engines.md).
	Engine   string
	Adapter  adapter.Config
	WorkerID string
	// SchedulerAddr lists the scheduler replicas' gRPC addresses
	// (comma-separated; it registers with each); empty runs standalone (no
	// registration).
	SchedulerAddr string
	// AdvertiseAddr is the gRPC address others dial to reach this shim;
	// empty means the address the server listens on.
	AdvertiseAddr string
	Model         string

	BlockSize           int
	NumGPUBlocks        int
	HostBlocks          int
	DiskBlocks          int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	SpeedUp             float64
	Seed                int64
	// Perf is the simulated engine's step-time model: a preset
	// (enginesim.Presets, whose KV capacity also sizes the cache unless
	// NumGPUBlocks is set), "mocker" (Dynamo's polynomials) or a JSON table
	// file (enginesim.ParseTableModel).
	Perf string

	// PoolAddr is the kv-pool service's gRPC address: the simulated engine
	// writes what its last local tier evicts there and loads prompt
	// prefixes from it. Empty = no shared pool.
	PoolAddr string
	// PoolBandwidth is pool→GPU bytes/s (0 = the engine's default).
	PoolBandwidth float64
	// PoolTimeout bounds one pool read or write; a read that times out is a
	// miss.
	PoolTimeout time.Duration

	// ReplayBatches is how many event batches the replay buffer keeps.
	ReplayBatches int
	// RegisterRetry is the longest wait between failed registration or
	// heartbeat attempts (they back off to it from 100 ms).
	RegisterRetry time.Duration
	// DrainTimeout bounds how long shutdown waits for requests in flight.
	DrainTimeout time.Duration
	// PromptCacheTokens bounds the prompts kept whole for the next turn to
	// name as its base (prompts.go); 0 keeps none.
	PromptCacheTokens int
}

// DefaultConfig returns the defaults; engine sizes come from
// enginesim.DefaultConfig so they live in one place.
func DefaultConfig() Config {
	e := enginesim.DefaultConfig()
	return Config{
		Engine:              "sim",
		Adapter:             adapter.DefaultConfig(),
		WorkerID:            "worker-0",
		Model:               e.Model.Name,
		BlockSize:           e.BlockSize,
		Perf:                enginesim.DefaultPreset,
		MaxNumSeqs:          e.MaxNumSeqs,
		MaxNumBatchedTokens: e.MaxNumBatchedTokens,
		SpeedUp:             e.SpeedUp,
		PoolTimeout:         100 * time.Millisecond,
		ReplayBatches:       10_000, // vLLM's buffer_steps
		RegisterRetry:       time.Second,
		DrainTimeout:        8 * time.Second, // inside servicekit's default 10 s shutdown budget
		// 512 Ki tokens: about 2.4 MB of ids and hashes, the latest turns
		// of five sessions at 100k tokens. At 1 Mi the shim's RSS grew by
		// 13 MiB before it levelled off, past the soak test's bound.
		PromptCacheTokens: 512 << 10,
	}
}

// RegisterFlags registers the shim's flags (SWITCHYARD_* with EnvFlags).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Engine, "engine", c.Engine, "engine behind the shim: sim | vllm | sglang")
	c.Adapter.RegisterFlags(fs)
	fs.StringVar(&c.WorkerID, "worker-id", c.WorkerID, "worker id, unique in the fleet")
	fs.StringVar(&c.SchedulerAddr, "scheduler-addr", c.SchedulerAddr, `scheduler gRPC addresses to register with, comma-separated (every replica); "" runs standalone`)
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", c.AdvertiseAddr, "gRPC address other services dial to reach this shim (default: the listen address)")
	fs.StringVar(&c.Model, "model", c.Model, "model name reported to the mesh")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "tokens per KV block")
	fs.IntVar(&c.NumGPUBlocks, "num-gpu-blocks", c.NumGPUBlocks, "device KV capacity in blocks (0 = the --perf preset's capacity)")
	fs.IntVar(&c.HostBlocks, "host-blocks", c.HostBlocks, "host KV tier capacity in blocks (0 = none)")
	fs.IntVar(&c.DiskBlocks, "disk-blocks", c.DiskBlocks, "disk KV tier capacity in blocks (0 = none)")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "most requests running at once")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "token budget per engine step")
	fs.Float64Var(&c.SpeedUp, "speedup", c.SpeedUp, "simulated engine speed-up factor (divides every step time)")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "engine seed (same seed and inputs, same tokens)")
	fs.StringVar(&c.Perf, "perf", c.Perf, "simulated engine step times: a preset ("+strings.Join(presetNames(), ", ")+"), mocker (Dynamo's polynomials) or a JSON table file")
	fs.StringVar(&c.PoolAddr, "pool-addr", c.PoolAddr, `kv-pool gRPC address: the simulated engine writes evicted blocks there and loads prefixes from it; "" = no shared pool`)
	fs.Float64Var(&c.PoolBandwidth, "pool-bandwidth", c.PoolBandwidth, "shared pool → GPU bytes/s (0 = the engine default, 25e9)")
	fs.DurationVar(&c.PoolTimeout, "pool-timeout", c.PoolTimeout, "longest wait for one shared pool call, above 0; a read that times out is a miss")
	fs.IntVar(&c.ReplayBatches, "replay-batches", c.ReplayBatches, "KV event batches kept for replay")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long shutdown waits for requests in flight to finish")
	fs.IntVar(&c.PromptCacheTokens, "prompt-cache-tokens", c.PromptCacheTokens, "tokens of recent prompts kept whole, so a session's next turn sends only what it adds (0 = keep none)")
}

// engineConfig derives the simulated engine's configuration.
func (c Config) engineConfig(vocab []uint32) (enginesim.Config, error) {
	ec := enginesim.Config{
		WorkerID:              c.WorkerID,
		BlockSize:             c.BlockSize,
		NumGPUBlocks:          c.NumGPUBlocks,
		HostBlocks:            c.HostBlocks,
		DiskBlocks:            c.DiskBlocks,
		MaxNumSeqs:            c.MaxNumSeqs,
		MaxNumBatchedTokens:   c.MaxNumBatchedTokens,
		SpeedUp:               c.SpeedUp,
		Seed:                  c.Seed,
		Vocab:                 vocab,
		PoolTransferBandwidth: c.PoolBandwidth,
	}
	perf, preset, err := enginesim.ResolvePerf(c.Perf, os.ReadFile)
	if err != nil {
		return ec, err
	}
	if preset != nil {
		preset.Apply(&ec)
	}
	ec.Perf = perf
	if c.NumGPUBlocks > 0 {
		ec.NumGPUBlocks = c.NumGPUBlocks
	}
	return ec, nil
}

func presetNames() []string {
	var names []string
	for _, p := range enginesim.Presets() {
		names = append(names, p.Name)
	}
	return names
}
