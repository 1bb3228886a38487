package replay

import (
	"errors"
	"fmt"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/pkg/routing"
)

// Config is one simulated run: a cluster, a policy and a concurrency level.
type Config struct {
	// Workers is the number of simulated engines.
	Workers int
	// Engine configures every engine (WorkerID and Seed are set per worker).
	// BlockSize is the engine block size; zero fields take enginesim's
	// defaults except BlockSize, which defaults to DefaultEngineBlockSize.
	Engine enginesim.Config
	// Policy is the routing policy; session_aware adds admission control.
	Policy routing.Policy
	// Routing overrides the router's cost-function knobs (Policy and
	// BlockSize are always set from this Config); nil = routing defaults.
	Routing *routing.Config
	// Admission configures admission control for session_aware; nil =
	// admission defaults.
	Admission *admission.Config
	// SharedPool, when Pages > 0, gives the cluster one shared KV pool
	// (package kvpool) that every engine writes what its last local tier
	// evicts to and loads prompt prefixes from; its events feed the flash
	// index's shared-pool index. With a pool and Routing nil, the router
	// credits pool blocks at routing.SharedPoolCacheMultiplier.
	SharedPool PoolConfig
	// Hints, when set, runs the KV hint policies (package hints) with this
	// configuration, as the kvhint emitter does; nil = no hints.
	Hints *hints.Config
	// Concurrency is the number of top-level sessions active at once.
	Concurrency int
	// MaxGap caps every tool gap (0 = as in the trace). Long user pauses
	// in real sessions (hours) only stretch simulated time.
	MaxGap time.Duration
	// Sessions limits the run to the first n top-level sessions (0 = all).
	Sessions int
	// Seed drives every random choice (router tie-breaks, engine seeds).
	Seed int64
	// Progress, when set, is called after each top-level session ends.
	Progress func(done, total int)
	// OnTurn, when set, is called for every completed turn (traces, timelines).
	OnTurn func(TurnResult)
	// SteadyOnly ends the run when the steady state ends (the first session
	// that no queued session can replace finishes), so that every metric
	// covers the same window; the rest of the sessions' turns are not run.
	SteadyOnly bool
	// Done, when set, aborts the run once closed (Run returns ErrAborted).
	Done <-chan struct{}
}

// PoolConfig sizes the simulated shared pool.
type PoolConfig struct {
	// Pages is the pool's capacity in engine blocks for the whole cluster
	// (0 = no pool).
	Pages int
	// Layout splits each page into objects (Layout.TPSize ranks × K and V);
	// the zero value is one rank.
	Layout kvpool.Layout
}

// ErrAborted is returned by Run when Config.Done closed.
var ErrAborted = errors.New("replay: aborted")

// DefaultEngineBlockSize is the engine block size the simulator uses unless
// told otherwise: 64 tokens, the Weka traces' block and a common page size
// (SGLang, TensorRT-LLM); with 16-token blocks the Weka corpus costs four
// times as many block lookups for the same answer.
const DefaultEngineBlockSize = 64

// DefaultConfig is the single place the simulator's defaults live: eight
// default engines (see enginesim's hardware profile) behind the kv policy,
// 32 sessions at once.
func DefaultConfig() Config {
	e := enginesim.DefaultConfig()
	e.BlockSize = DefaultEngineBlockSize
	e.NumGPUBlocks = 262144 / DefaultEngineBlockSize
	return Config{Workers: 8, Engine: e, Policy: routing.PolicyKV, Concurrency: 32, Seed: 1}
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.Engine.BlockSize <= 0 {
		c.Engine.BlockSize = DefaultEngineBlockSize
	}
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if _, err := routing.ParsePolicy(string(c.Policy)); err != nil {
		return c, err
	}
	if c.Concurrency <= 0 {
		c.Concurrency = d.Concurrency
	}
	if c.SharedPool.Pages < 0 || c.SharedPool.Pages >= 1<<30/max(c.SharedPool.Layout.ObjectsPerPage(), 1) {
		return c, fmt.Errorf("replay: shared pool of %d pages out of range", c.SharedPool.Pages)
	}
	if err := c.SharedPool.Layout.Validate(); err != nil {
		return c, err
	}
	if c.Concurrency > 1<<20 || c.Workers > 4096 {
		return c, fmt.Errorf("replay: concurrency %d or workers %d out of range", c.Concurrency, c.Workers)
	}
	return c, nil
}
