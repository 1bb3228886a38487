package kvpoolservice

import (
	"flag"
	"fmt"
)

// Config configures the service.
type Config struct {
	// CapacityPages is the pool's capacity in pages (engine blocks); it holds
	// CapacityPages × 2 × TPSize objects.
	CapacityPages int
	// TPSize and KeyPrefix are the object layout (kvpool.Layout).
	TPSize    int
	KeyPrefix string
	// ReplayEvents is how many recent events are kept for subscribers that
	// resume; one further behind gets a snapshot.
	ReplayEvents int
}

// DefaultConfig is the one place defaults live: 65,536 pages (1 M tokens at
// 16-token blocks, 128 GiB of the default model's KV), one TP rank.
func DefaultConfig() Config {
	return Config{CapacityPages: 65536, TPSize: 1, ReplayEvents: 1 << 20}
}

func (c Config) validate() error {
	if c.CapacityPages < 1 || c.TPSize < 1 || c.CapacityPages > (1<<30)/(2*c.TPSize) {
		return fmt.Errorf("kv-pool: capacity %d pages × TP size %d out of range", c.CapacityPages, c.TPSize)
	}
	if c.ReplayEvents < 1 {
		return fmt.Errorf("kv-pool: replay buffer of %d events", c.ReplayEvents)
	}
	return nil
}

// RegisterFlags registers the service's flags (SWITCHYARD_* with EnvFlags).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.CapacityPages, "capacity-pages", c.CapacityPages, "pool capacity in pages (engine blocks)")
	fs.IntVar(&c.TPSize, "tp-size", c.TPSize, "tensor-parallel ranks per page: each stores its own K and V object")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix, "prefix of every object key (SGLang's extra_backend_tag)")
	fs.IntVar(&c.ReplayEvents, "replay-events", c.ReplayEvents, "recent events kept for subscribers that resume")
}
