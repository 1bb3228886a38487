package flashindexer

import (
	"flag"
	"time"

	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/kvhash"
)

// Config configures the service.
type Config struct {
	// SchedulerAddr is the scheduler's gRPC address (WatchWorkers).
	SchedulerAddr string
	// MaxBlocks bounds the index (see package doc for bytes per block).
	MaxBlocks int
	// BlockSize is the tokens per block used for FindMatches by tokens when
	// the request leaves it 0.
	BlockSize int
	// BackoffMin and BackoffMax bound reconnect delays to any peer.
	BackoffMin, BackoffMax time.Duration
}

// DefaultConfig is the one place defaults live.
func DefaultConfig() Config {
	return Config{
		SchedulerAddr: "127.0.0.1:9100",
		MaxBlocks:     flashindex.DefaultConfig().MaxBlocks,
		BlockSize:     kvhash.DefaultBlockSize,
		BackoffMin:    100 * time.Millisecond,
		BackoffMax:    5 * time.Second,
	}
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
	if c.BackoffMin <= 0 {
		c.BackoffMin = d.BackoffMin
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(d.BackoffMax, c.BackoffMin)
	}
	return c
}

// RegisterFlags registers the service's flags (SWITCHYARD_* with EnvFlags).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SchedulerAddr, "scheduler-addr", c.SchedulerAddr, "scheduler gRPC address (worker membership)")
	fs.IntVar(&c.MaxBlocks, "max-blocks", c.MaxBlocks, "most distinct KV blocks indexed (~56 B each); beyond it new blocks are refused and counted")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "tokens per block for FindMatches by tokens when the request gives none")
	fs.DurationVar(&c.BackoffMin, "backoff-min", c.BackoffMin, "first reconnect delay to a peer")
	fs.DurationVar(&c.BackoffMax, "backoff-max", c.BackoffMax, "longest reconnect delay to a peer")
}
