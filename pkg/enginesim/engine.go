package enginesim

import (
	"time"

	"switchyard.dev/pkg/kv"
)

// Engine is one simulated inference engine. It is not safe for concurrent
// use: its driver serializes every call.
type Engine struct {
	cfg           Config
	bytesPerBlock float64

	pool   *blockPool
	host   *tierStore // nil when there is no host tier
	disk   *tierStore // nil when there is no disk tier
	shared SharedPool // nil when there is no shared pool

	reqs      []request
	freeSlots []int32
	byID      map[string]int32
	running   []int32 // admission order; preemption takes from the end
	waiting   []int32 // by priority, then FCFS; preempted requests go to the front of their priority

	sessions   []string // interned session ids; 0 is ""
	sessionIdx map[string]int32

	log eventLog

	// clock is the engine's own modelled time (speed-up not applied): the
	// sum of its step durations. Transfers are booked on it.
	clock time.Duration
	// linkFree is when each tier's link into the device is next idle: loads
	// over one link run one after another, and beside the steps.
	linkFree [kv.NumTiers]time.Duration
	// loads are the admitted requests still waiting for their KV to arrive
	// from a lower tier (request.loading), with the time it lands.
	loads []loadWait

	stats Stats

	done []int32 // requests finished in this step

	deferred     []deferredHint
	deferredFree int // free device blocks when the queue was last tried

	// Step scratch, reused across steps.
	batch    Batch
	sched    []scheduled
	outs     []Output
	hitPlan  []hit
	tokBuf   []uint32
	preempts []string

	// Cache changes of the batch passes (pending.go): deferOps is set only
	// while a pass records into pend.
	deferOps bool
	pend     []pendOp
	sink     int32 // keeps flushPending's touch loads alive
}

// New builds an engine; zero Config fields take their defaults.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		sched:         make([]scheduled, 0, cfg.MaxNumSeqs),
		outs:          make([]Output, 0, cfg.MaxNumSeqs),
		cfg:           cfg,
		bytesPerBlock: float64(cfg.Model.BytesPerToken()) * float64(cfg.BlockSize),
		pool:          newBlockPool(cfg.NumGPUBlocks),
		byID:          make(map[string]int32),
		sessions:      []string{""},
		sessionIdx:    map[string]int32{"": 0},
		tokBuf:        make([]uint32, cfg.BlockSize),
		shared:        cfg.SharedPool,
	}
	if cfg.HostBlocks > 0 {
		e.host = newTierStore(kv.TierHost, cfg.HostBlocks)
	}
	if cfg.DiskBlocks > 0 {
		e.disk = newTierStore(kv.TierDisk, cfg.DiskBlocks)
	}
	return e, nil
}

// Config returns the effective configuration (defaults filled in).
func (e *Engine) Config() Config { return e.cfg }

// CapacityTokens is the device KV capacity in tokens.
func (e *Engine) CapacityTokens() int { return e.cfg.NumGPUBlocks * e.cfg.BlockSize }

// MaxSequenceTokens is the longest a request's prompt plus output may grow:
// the device KV capacity, or the model's MaxModelLen when that is shorter.
func (e *Engine) MaxSequenceTokens() int {
	if m := e.cfg.Model.MaxModelLen; m > 0 {
		return min(m, e.CapacityTokens())
	}
	return e.CapacityTokens()
}

// HasWork reports whether Step would do anything.
func (e *Engine) HasWork() bool { return len(e.running) > 0 || len(e.waiting) > 0 }

func ceilDiv(a, b int) int { return (a + b - 1) / b }
