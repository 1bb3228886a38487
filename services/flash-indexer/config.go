package flashindexer

import (
	"flag"
	"time"

	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/services/servicekit"
)

// Config configures the service.
type Config struct {
	// SchedulerAddr lists the scheduler replicas (WatchWorkers from any).
	SchedulerAddr string
	// PoolAddr is the kv-pool service's gRPC address, whose event stream
	// feeds the shared-pool index; empty = no shared pool.
	PoolAddr string
	// PoolMaxObjects bounds the shared-pool index: beyond it the index
	// clears itself and rebuilds from the pool's events. 0 takes
	// flashindex.DefaultPoolMaxObjects.
	PoolMaxObjects int
	// MaxBlocks bounds the index (see package doc for bytes per block).
	MaxBlocks int
	// BlockSize is the tokens per block used for FindMatches by tokens when
	// the request leaves it 0.
	BlockSize int
	// Backoff paces reconnections to any peer.
	Backoff servicekit.Backoff
	// PredictTTL is the life of a PredictRoute prediction that names none;
	// PredictMaxTTL caps any, that one included (0 takes the larger of its
	// default and PredictTTL).
	PredictTTL, PredictMaxTTL time.Duration
	// MaxPredictedBlocks bounds the blocks of all live predictions.
	MaxPredictedBlocks int
	// StaleAfter bounds how long a worker's blocks count as hits without
	// a sign that its KV event stream is live (a batch, a snapshot, or a
	// health probe answered over the subscription's connection, sent every
	// StaleAfter/3 and given up to StaleAfter to answer). Past it FindMatches
	// leaves the worker out until its snapshot is reloaded. The shared pool's
	// stream follows the same rule: its pages stop counting until the pool
	// index catches up (a snapshot, or the events from the position it had
	// up to the pool's last when it resubscribed).
	// 0 takes the default; negative: never.
	StaleAfter time.Duration
	// ChainCacheHashes bounds the hash chains of recent queries kept whole
	// for a later query to name as its base (FindMatches' base); 0 keeps
	// none.
	ChainCacheHashes int
}

// DefaultConfig is the one place defaults live.
func DefaultConfig() Config {
	return Config{
		SchedulerAddr: servicekit.LocalAddr("scheduler"),
		MaxBlocks:     flashindex.DefaultConfig().MaxBlocks,
		BlockSize:     kvhash.DefaultBlockSize,
		Backoff:       servicekit.DefaultBackoff(),
		// Long enough for a prefill to start and its Stored events to
		// arrive; short enough that a wrong guess fades quickly.
		PredictTTL:         5 * time.Second,
		PredictMaxTTL:      time.Minute,
		MaxPredictedBlocks: flashindex.DefaultConfig().MaxPredictedBlocks,
		PoolMaxObjects:     flashindex.DefaultPoolMaxObjects,
		// Three probe periods of a second: a slow answer or two under load
		// does not demote a worker, and no stale block is served as a hit
		// for much longer than the scheduler takes to notice a dead shim.
		StaleAfter:       3 * time.Second,
		ChainCacheHashes: basecache.DefaultChainHashes,
	}
}

// probeInterval is how often each subscribed shim is probed: three chances
// to answer within the bound (a probe still in flight is not doubled).
func (c Config) probeInterval() time.Duration {
	return max(c.StaleAfter/3, time.Millisecond)
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SchedulerAddr == "" {
		c.SchedulerAddr = d.SchedulerAddr
	}
	if c.MaxBlocks <= 0 {
		c.MaxBlocks = d.MaxBlocks
	}
	if c.BlockSize <= 0 {
		c.BlockSize = d.BlockSize
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.PredictTTL <= 0 {
		c.PredictTTL = d.PredictTTL
	}
	if c.PredictMaxTTL <= 0 {
		c.PredictMaxTTL = max(d.PredictMaxTTL, c.PredictTTL)
	}
	if c.PoolMaxObjects <= 0 {
		c.PoolMaxObjects = d.PoolMaxObjects
	}
	if c.MaxPredictedBlocks <= 0 {
		c.MaxPredictedBlocks = d.MaxPredictedBlocks
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = d.StaleAfter
	}
	return c
}

// RegisterFlags registers the service's flags (SWITCHYARD_* with EnvFlags).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SchedulerAddr, "scheduler-addr", c.SchedulerAddr, "scheduler gRPC addresses, comma-separated (worker membership, from whichever replica answers)")
	fs.StringVar(&c.PoolAddr, "pool-addr", c.PoolAddr, `kv-pool gRPC address: follow the shared pool's events so FindMatches credits its blocks; "" = no shared pool`)
	fs.IntVar(&c.PoolMaxObjects, "pool-max-objects", c.PoolMaxObjects, "most shared-pool objects indexed (pages × 2 × the pool's TP size when full); past it the pool index clears and rebuilds from the pool's events")
	fs.IntVar(&c.MaxBlocks, "max-blocks", c.MaxBlocks, "most distinct KV blocks indexed (~48 B each); beyond it new blocks are refused and counted")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "tokens per block for FindMatches by tokens when the request gives none")
	c.Backoff.RegisterFlags(fs, "a peer")
	fs.DurationVar(&c.PredictTTL, "predict-ttl", c.PredictTTL, "life of a PredictRoute prediction that gives no TTL (its worker's own KV events replace it sooner)")
	fs.DurationVar(&c.PredictMaxTTL, "predict-max-ttl", c.PredictMaxTTL, "longest TTL a PredictRoute prediction may ask for; a longer --predict-ttl is cut to it")
	fs.DurationVar(&c.StaleAfter, "stale-after", c.StaleAfter, "a worker whose KV event stream shows no sign of life this long (no batch, no snapshot, no answer to the health probe sent every stale-after/3 over its subscription's connection) is left out of FindMatches until its snapshot is reloaded; so are the shared pool's pages (--pool-addr), until the pool index catches up; negative = never")
	fs.IntVar(&c.ChainCacheHashes, "chain-cache-hashes", c.ChainCacheHashes, "memory for recent queries' hash chains, in 8-byte hashes (each chain's room and bookkeeping counted), so that a session's next FindMatches sends only the hashes its chain adds; about 7,100 per 100k-token session (0 = keep none)")
	fs.IntVar(&c.MaxPredictedBlocks, "max-predicted-blocks", c.MaxPredictedBlocks, "most blocks of all live predictions together (~48 B each); beyond it the soonest to expire go first")
	for _, name := range []string{"pool-max-objects", "max-blocks", "block-size", "predict-ttl", "predict-max-ttl", "max-predicted-blocks"} {
		servicekit.Bound(fs, name, "> 0", func(v float64) bool { return v > 0 })
	}
	servicekit.Bound(fs, "chain-cache-hashes", "≥ 0", func(v float64) bool { return v >= 0 })
}
