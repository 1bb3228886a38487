package flashindex

import (
	"errors"
	"sync"

	"switchyard.dev/pkg/kv"
)

// Config bounds the index. The zero value means DefaultConfig.
type Config struct {
	// MaxBlocks caps the number of distinct blocks tracked (including
	// ancestors kept only as chain links). A Stored event that would exceed it
	// is cut short there and the rest is counted in Stats.Dropped: the index
	// then under-reports overlap, which costs a cache miss, never a wrong
	// route to a worker that lacks the blocks. About 48 bytes per block held
	// by one worker and less per entry when shared, so the default bounds the
	// index under 1 GiB. Capped at 2^26 (node ids are 28 bits).
	MaxBlocks int
	// WriteChunk is the most blocks applied under one hold of the write lock;
	// it bounds how long a reader can wait behind a large Stored event, and
	// is the grain at which a reader may see an event applied in part
	// (Apply).
	WriteChunk int
	// SweepChunk is the most nodes scanned under one hold of the write lock
	// when a removed or cleared worker's entries are swept.
	SweepChunk int
	// MaxPredictedBlocks bounds the blocks of all live predictions together
	// (about 48 bytes each); beyond it the soonest to expire go first.
	MaxPredictedBlocks int
}

// DefaultConfig is the configuration used for zero fields.
func DefaultConfig() Config {
	return Config{MaxBlocks: 16 << 20, WriteChunk: 512, SweepChunk: 16384, MaxPredictedBlocks: 1 << 20}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBlocks <= 0 {
		c.MaxBlocks = d.MaxBlocks
	}
	// Ghost parents can at most double the nodes of MaxBlocks blocks.
	c.MaxBlocks = min(c.MaxBlocks, maxNodes/2)
	if c.WriteChunk <= 0 {
		c.WriteChunk = d.WriteChunk
	}
	if c.SweepChunk <= 0 {
		c.SweepChunk = d.SweepChunk
	}
	if c.MaxPredictedBlocks <= 0 {
		c.MaxPredictedBlocks = d.MaxPredictedBlocks
	}
	return c
}

// Errors returned by Apply.
var (
	ErrBadEvent     = errors.New("flashindex: invalid event")
	ErrTooManySlots = errors.New("flashindex: too many (worker, dp rank) pairs")
)

// Index is the KV index. The zero value is not usable; call New.
type Index struct {
	cfg Config

	wmu     sync.Mutex
	workers map[string]*workerState

	// mu guards everything below; writers hold it for a chunk at a time
	// (Apply, sweep).
	mu       sync.RWMutex
	ids      blockTable
	chunks   [][]node
	slabLen  int
	free     []uint32
	sideOf   [][]uint32 // per node chunk (nil until needed): side entry+1, 0 = none
	sides    [][]sideSets
	sideLen  int
	sideFree []uint32
	bits     bitsets // every slotSet's bitset, when it has one
	pred     predictions
	levels   int // cumulative levels tracked: 1 + highest tier ever seen

	slots     []slotState
	freeSlots []slot
	deadMask  []uint64
	deadCount int

	entries  [kv.NumTiers]int
	counters counters
	stack    []uint32 // reroot's and unroot's walk
	// Per block of the batch being applied (prefetch): tagOf, node index+1
	// (0 = absent), and the table slot that held it or ended its probe run.
	tags  []uint64
	found []uint32
	at    []uint64
	sink  uint64 // keeps prefetch's loads from being optimised away

	scratch  sync.Pool
	pool     poolRef        // the shared-pool index, when attached
	resident residentChains // chains Resident walked
}

// slotState is one (worker, dp rank) slot: whose it is, and its entries per
// tier and non-rooted holdings per level (Stats).
type slotState struct {
	worker   string
	dp       uint32
	used     bool // allocated to a (worker, dp)
	dead     bool // retired, waiting for its sweep
	held     [kv.NumTiers]int
	unrooted [kv.NumTiers]int // per cumulative level
}

type counters struct {
	blockEvents uint64 // blocks in applied Stored/Removed events
	duplicates  uint64 // stores of blocks already held, removals of blocks not held
	dropped     uint64 // blocks not stored because MaxBlocks was reached
	clears      uint64
}

// New returns an empty index.
func New(cfg Config) *Index {
	ix := &Index{
		cfg:     cfg.withDefaults(),
		workers: make(map[string]*workerState),
		levels:  1,
	}
	ix.ids.chunks = &ix.chunks
	return ix
}
