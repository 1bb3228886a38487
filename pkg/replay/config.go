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

// The largest experiments a Config describes: bounds that keep a mistyped
// value from allocating without end.
const (
	MaxSchedulerReplicas = 64
	MaxConcurrency       = 1 << 20
	MaxWorkers           = 4096
)

// Config is one simulated run: a cluster, a policy, a concurrency level and
// a seed, measured over one window.
type Config struct {
	// Workers is the number of simulated engines.
	Workers int
	// Engine configures every engine (WorkerID and Seed are set per worker;
	// the oracle's device KV is unbounded). BlockSize is the engine block
	// size; zero fields take enginesim's defaults except BlockSize, which
	// defaults to DefaultEngineBlockSize.
	Engine enginesim.Config
	// Policy is the experiment's row (see Policy).
	Policy Policy
	// Routing overrides the router's cost-function knobs (Policy and
	// BlockSize are always set from this Config); nil = routing defaults.
	Routing *routing.Config
	// Admission configures session_aware's admission control; nil =
	// admission.DefaultConfig(). thunderagent always runs upstream's.
	Admission *admission.Config
	// SessionCap is kv_cap's limit of active sessions per worker: the
	// fleet has SessionCap × Workers slots, and kv routes the sessions
	// that hold one wherever it would.
	SessionCap int
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
	// Split is the part of the workload's sessions the run draws from.
	Split Split
	// MaxGap caps every tool gap (0 = as in the trace; DefaultMaxGap).
	MaxGap time.Duration
	// Warmup is simulated time run before the window and not measured;
	// Window is the measured interval that follows.
	Warmup, Window time.Duration
	// Seed drives every random choice: the sessions drawn, their start
	// offsets, router tie-breaks, engine seeds.
	Seed int64
	// Progress, when set, is called as simulated time advances (at most
	// once per simulated second), with the run's end time.
	Progress func(now, end time.Duration)
	// OnTurn, when set, is called for every completed turn (traces, timelines).
	OnTurn func(TurnResult)
	// Done, when set, aborts the run once closed (Run returns ErrAborted).
	Done <-chan struct{}
	// SchedulerReplicas runs that many schedulers (0 or 1: one), each with
	// its own pipeline owning the programs that rendezvous hashing gives it
	// (turns.Owner), admission deciding with its share of each worker
	// (admission.SetShares) from what the others' programs use there, as heard
	// SyncDelay ago (replicas.go).
	SchedulerReplicas int
	SyncDelay         time.Duration
	// SessionEnd is how a session's end reaches its scheduler; "" is
	// SessionEndExplicit.
	SessionEnd SessionEnd
	// Calls, when set, receives every call the run makes into its
	// scheduling pipelines, in order, with their inputs and answers
	// (calls.go).
	Calls func(Call)
}

// SessionEnd is how the scheduler learns that a session is over, which
// releases its program (admission) and its routing state.
type SessionEnd string

const (
	// SessionEndExplicit tells the pipeline when the session's walk ends
	// (its last turn and its tail sub-agents done): an end no live client
	// reports, the replay's default since it began.
	SessionEndExplicit SessionEnd = "explicit"
	// SessionEndFinal marks each session's last turn final
	// (x-dynamo-session-final, as switchyard loadgen sends it): the
	// program is released when that turn ends with nothing else in flight.
	SessionEndFinal SessionEnd = "final"
	// SessionEndIdle reports nothing: the program is released after
	// admission's idle TTL, as for a client that sends no end.
	SessionEndIdle SessionEnd = "idle"
)

// ParseSessionEnd parses a SessionEnd by name.
func ParseSessionEnd(s string) (SessionEnd, error) {
	switch e := SessionEnd(s); e {
	case SessionEndExplicit, SessionEndFinal, SessionEndIdle:
		return e, nil
	}
	return "", fmt.Errorf("replay: unknown session end %q (explicit, final, idle)", s)
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

// Default experiment settings (docs/results.md).
const (
	// DefaultWarmup is long enough for the closed loop's start to wash
	// out of every policy's window: on the tune half a session cap's queue
	// of first sessions takes about 4 hours to drain (docs/results.md's
	// warmup check).
	DefaultWarmup = 4 * time.Hour
	DefaultWindow = 2 * time.Hour
	// DefaultMaxGap caps the gaps between turns: a gap longer than ThunderAgent's
	// idle TTL is a user away, not a tool call. Weka's gaps longer than 10
	// minutes are 5 % of them but half their time (one of 21.5 hours), and
	// uncapped they fill a closed loop's slots with sessions idle for hours:
	// a concurrency level would not count sessions at work, and the loop
	// would need many hours to settle (docs/results.md).
	DefaultMaxGap = 10 * time.Minute
	// DefaultSessionCap is kv_cap's cap per worker, the best on the tune
	// half of the Llama cluster (docs/results.md): it binds only at its
	// highest level.
	DefaultSessionCap = 16
)

// DefaultConfig is the single place the simulator's defaults live: four
// workers of the default preset (enginesim's Llama-3.1-8B on one H100)
// behind the kv policy, 16 sessions at once, gaps capped at 10 minutes, a
// 4 hour warmup and a 2 hour window over every session of the workload.
func DefaultConfig() Config {
	e := enginesim.DefaultConfig()
	e.BlockSize = DefaultEngineBlockSize
	p, err := enginesim.LookupPreset(enginesim.DefaultPreset)
	if err != nil {
		panic(err) // unreachable: the default is a preset
	}
	p.Apply(&e)
	return Config{Workers: 4, Engine: e, Policy: PolicyKV, SessionCap: DefaultSessionCap, Concurrency: 16,
		Split: SplitAll, MaxGap: DefaultMaxGap, Warmup: DefaultWarmup, Window: DefaultWindow, Seed: 1}
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
	if _, err := ParsePolicy(string(c.Policy)); err != nil {
		return c, err
	}
	if c.Split == "" {
		c.Split = SplitAll
	}
	if c.SessionEnd == "" {
		c.SessionEnd = SessionEndExplicit
	}
	if _, err := ParseSessionEnd(string(c.SessionEnd)); err != nil {
		return c, err
	}
	if _, err := ParseSplit(string(c.Split)); err != nil {
		return c, err
	}
	if c.Concurrency <= 0 {
		c.Concurrency = d.Concurrency
	}
	if c.SessionCap <= 0 {
		c.SessionCap = d.SessionCap
	}
	if c.Window <= 0 {
		return c, fmt.Errorf("replay: the window must be positive")
	}
	if c.Warmup < 0 || c.MaxGap < 0 {
		return c, fmt.Errorf("replay: warmup and max gap must not be negative")
	}
	if c.SharedPool.Pages < 0 || c.SharedPool.Pages >= 1<<30/max(c.SharedPool.Layout.ObjectsPerPage(), 1) {
		return c, fmt.Errorf("replay: shared pool of %d pages out of range", c.SharedPool.Pages)
	}
	if err := c.SharedPool.Layout.Validate(); err != nil {
		return c, err
	}
	if c.SchedulerReplicas < 0 || c.SchedulerReplicas > MaxSchedulerReplicas || c.SyncDelay < 0 {
		return c, fmt.Errorf("replay: %d scheduler replicas (0 to %d), sync delay %v (not negative): out of range", c.SchedulerReplicas, MaxSchedulerReplicas, c.SyncDelay)
	}
	if c.SchedulerReplicas == 0 {
		c.SchedulerReplicas = 1
	}
	if c.Concurrency > MaxConcurrency {
		return c, fmt.Errorf("replay: concurrency %d out of range (at most %d)", c.Concurrency, MaxConcurrency)
	}
	if c.Workers > MaxWorkers {
		return c, fmt.Errorf("replay: %d workers out of range (at most %d)", c.Workers, MaxWorkers)
	}
	return c, nil
}
