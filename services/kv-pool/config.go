package kvpoolservice

import (
	"flag"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"switchyard.dev/pkg/kvpool"
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
	// Checked only once the figures above are sane (no overflow).
	if n := c.snapshotBytes(); n > maxMessageBytes {
		return fmt.Errorf("kv-pool: a full pool of %d pages × TP size %d is a %d MiB snapshot, over the %d MiB a gRPC message carries: no subscriber could load it",
			c.CapacityPages, c.TPSize, n>>20, maxMessageBytes>>20)
	}
	if c.ReplayEvents < 1 {
		return fmt.Errorf("kv-pool: replay buffer of %d events", c.ReplayEvents)
	}
	return nil
}

// RegisterFlags registers the service's flags (SWITCHYARD_* with EnvFlags).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.CapacityPages, "capacity-pages", c.CapacityPages, "pool capacity in pages (engine blocks); a full pool's snapshot must fit one 64 MiB gRPC message (about 3 M objects of capacity-pages × 2 × tp-size)")
	fs.IntVar(&c.TPSize, "tp-size", c.TPSize, "tensor-parallel ranks per page: each stores its own K and V object")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix, "prefix of every object key (SGLang's extra_backend_tag)")
	fs.IntVar(&c.ReplayEvents, "replay-events", c.ReplayEvents, "recent events kept for subscribers that resume")
}

// maxMessageBytes is the mesh's bound on one gRPC message
// (servicekit.Server's and its clients').
const maxMessageBytes = 64 << 20

// snapshotBytes bounds the first message a new subscriber gets from a full
// pool: every object's key in the snapshot, and the events sent with it.
// Keys have one length per layout (16 hex digits), the rank's digits aside.
func (c Config) snapshotBytes() int {
	l := kvpool.Layout{TPSize: c.TPSize, KeyPrefix: c.KeyPrefix}
	n := len(l.Key(kvpool.Object{Rank: uint16(c.TPSize - 1)}))
	key := 1 + protowire.SizeBytes(n) // tag, length, bytes
	// An event: its key, a sequence number (10), its type (2) and its own
	// tag and length (4). The rest: epoch, sequence, layout, framing.
	return c.CapacityPages*l.ObjectsPerPage()*key + kvpool.MaxEventsPerBatch*(key+16) + len(c.KeyPrefix) + 128
}
