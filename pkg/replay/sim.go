package replay

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/trace"
	"switchyard.dev/pkg/turns"
)

// epoch is virtual time zero, handed to the cores as a time.Time.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sim is one run: Run builds it, loop (events.go) drives it on virtual time.
// The rest is split by what it handles: sessions.go the session instances
// and their trees of sub-agents, dispatch.go a turn's way through admission
// and routing into an engine, steps.go the workers' engine steps and what
// they produce, hashing.go the turns' block hashes and the ideal caches.
type sim struct {
	cfg     Config
	w       *trace.Workload
	now     time.Duration
	seq     uint64
	q       eventQueue
	workers []*worker
	byID    map[string]int
	// listed is the workers' indices in the order the live registry lists
	// them (by id as text: w10 before w2), the order routing's ties break
	// in (candidates).
	listed   []int
	ix       *flashindex.Index
	pool     *kvpool.Store         // nil without a shared pool
	poolIx   *flashindex.PoolIndex // follows pool's events
	hints    *hintLoop             // nil without hints
	rep      *replicas             // the schedulers' decisions, as the live services make them (replicas.go)
	ctrl     *admission.Controller // the first replica's, nil without admission control
	capper   *admission.SessionCap // kv_cap
	capWait  map[admission.Key]int // sessions waiting for a kv_cap slot → instance
	sessions []sessState
	// subAgents are the sub-agents' names started, which must not repeat
	// (startSessionAt).
	subAgents map[string]struct{}
	reqs      []inflight
	parked    []int // sessions with a turn waiting for admission
	prompt    []uint32
	matches   flashindex.Matches
	cands     []routing.Candidate
	match     map[string]flashindex.WorkerMatch
	held      heldScratch
	seen      map[kv.BlockHash]struct{} // every prompt block sent so far: the infinite cache
	reqByID   map[string]int32          // engine outputs name requests by id

	pool0    []int      // top-level sessions of the split (workload indices)
	drawRNG  *rand.Rand // which session each draw is, and the first ones' offsets
	draws    int
	starting []start // the first draws, joining at their own times
	pending  int     // of which not joined yet
	active   int
	end      time.Duration
	lastProg time.Duration

	maxInput    int // longest prompt a turn may send (model context and the normal cache)
	engineBlock int
	alone       *aloneModel

	win     *window
	stopped bool
}

// oracleBlocks is the oracle's device KV per worker, in blocks: far more
// than the window's working sets (Run fails if the oracle ever evicts).
const oracleBlocks = 1 << 21

// Run replays the workload under cfg and returns its metrics over the
// window.
func Run(w *trace.Workload, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if err := w.Validate(); err != nil {
		return Result{}, err
	}
	s := &sim{cfg: cfg, w: w, byID: make(map[string]int), subAgents: map[string]struct{}{}, ix: flashindex.New(flashindex.Config{}),
		match: make(map[string]flashindex.WorkerMatch), seen: make(map[kv.BlockHash]struct{}), reqByID: make(map[string]int32),
		drawRNG: rand.New(rand.NewPCG(uint64(cfg.Seed), 0xd7a3)), end: cfg.Warmup + cfg.Window,
		win: &window{start: cfg.Warmup, end: cfg.Warmup + cfg.Window}}
	if s.pool0 = SplitSessions(w, cfg.Split); len(s.pool0) == 0 {
		return Result{}, fmt.Errorf("replay: workload %q has no top-level session with a turn in split %q", w.Name, cfg.Split)
	}
	rc := routing.DefaultConfig()
	if cfg.Routing != nil {
		rc = *cfg.Routing
	} else if cfg.SharedPool.Pages > 0 {
		rc.SharedCacheMultiplier = routing.SharedPoolCacheMultiplier
	}
	if cfg.SharedPool.Pages > 0 {
		l := cfg.SharedPool.Layout
		if s.pool, err = kvpool.New(kvpool.Config{Layout: l, Capacity: cfg.SharedPool.Pages * l.ObjectsPerPage()}); err != nil {
			return Result{}, err
		}
		if s.poolIx, err = flashindex.NewPoolIndex(l, 2*cfg.SharedPool.Pages*l.ObjectsPerPage()); err != nil {
			return Result{}, err
		}
		s.ix.AttachPool(s.poolIx)
	}
	rc.Policy = cfg.Policy.Routing()
	rc.BlockSize = cfg.Engine.BlockSize
	// A simulated engine never loses a finish: no in-flight turn is stale,
	// however long it runs.
	rc.StaleRequestAfter = 0
	replica := 0
	s.rep, err = newReplicas(cfg.SchedulerReplicas, cfg.SyncDelay, func() (*turns.Pipeline, error) {
		replica++ // each replica its own tie breaks; the first one's as a lone scheduler's
		return turns.New(turns.Config{Routing: rc, Admission: cfg.Policy.admission(cfg.Admission),
			Rand: turns.TieBreaks(uint64(cfg.Seed), replica-1)})
	})
	if err != nil {
		return Result{}, err
	}
	s.ctrl = s.rep.pipes[0].Controller()
	if cfg.Hints != nil {
		s.hints = newHintLoop(*cfg.Hints)
	}
	if cfg.Policy == PolicyKVCap {
		s.capper = admission.NewSessionCap(cfg.SessionCap * cfg.Workers)
		s.capWait = make(map[admission.Key]int)
	}
	for i := range cfg.Workers {
		ec := cfg.Engine
		ec.WorkerID = "w" + strconv.Itoa(i)
		ec.Seed = cfg.Seed*1000003 + int64(i)
		if s.pool != nil {
			ec.SharedPool = s.pool
		}
		if cfg.Policy == PolicyOracle {
			ec.NumGPUBlocks = oracleBlocks
		}
		eng, err := enginesim.New(ec)
		if err != nil {
			return Result{}, err
		}
		s.workers = append(s.workers, &worker{id: ec.WorkerID, eng: eng, seen: make(map[kv.BlockHash]struct{})})
		s.byID[ec.WorkerID] = i
		ecfg := eng.Config()
		bs := int64(ecfg.BlockSize)
		for _, p := range s.rep.pipes {
			p.SetWorker(ec.WorkerID, []int64{int64(ecfg.NumGPUBlocks) * bs, int64(ecfg.HostBlocks) * bs, int64(ecfg.DiskBlocks) * bs}, ecfg.MaxNumSeqs)
		}
		s.rep.workers = append(s.rep.workers, ec.WorkerID)
	}
	for i := range s.workers {
		s.listed = append(s.listed, i)
	}
	slices.SortFunc(s.listed, func(a, b int) int { return strings.Compare(s.workers[a].id, s.workers[b].id) })
	ecfg := s.workers[0].eng.Config()
	s.engineBlock = ecfg.BlockSize
	// Every policy sends the same prompts: the oracle's are clipped to the
	// cache the others have.
	s.maxInput = cfg.Engine.NumGPUBlocks * s.engineBlock
	if m := ecfg.Model.MaxModelLen; m > 0 {
		s.maxInput = min(s.maxInput, m)
	}
	if s.maxInput < 2*s.engineBlock+1 {
		return Result{}, fmt.Errorf("replay: the model's context or the KV cache holds %d tokens, and a turn needs two %d-token blocks and an output token (raise --max-model-len or --gpu-blocks)", s.maxInput, s.engineBlock)
	}
	s.alone = newAloneModel(s)

	maxIn := 0
	for _, ss := range w.Sessions {
		for _, t := range ss.Turns {
			maxIn = max(maxIn, t.InputLen)
		}
	}
	s.prompt = make([]uint32, min(maxIn, s.maxInput)+1)

	s.joinRunningFleet()
	// Replicas are separate processes: their ticks do not fall together
	// but spread over the interval.
	for i := range s.rep.pipes {
		s.push(s.tickInterval()+s.tickInterval()*time.Duration(i)/time.Duration(len(s.rep.pipes)), evTick, i)
	}
	if s.rep.syncing() {
		s.push(0, evSync, 0)
	}
	if s.hints != nil {
		s.push(s.hints.tick, evHints, 0)
	}
	s.push(cfg.Warmup, evWarm, 0)
	s.push(s.end, evEnd, 0)
	if err := s.loop(); err != nil {
		return Result{}, err
	}
	if cfg.Policy == PolicyOracle {
		for _, w := range s.workers {
			if n := w.eng.Stats().Evictions[kv.TierDevice]; n > 0 {
				return Result{}, fmt.Errorf("replay: the oracle's worker %s evicted %d blocks: its KV is not unbounded for this run", w.id, n)
			}
		}
	}
	return s.result(), nil
}

func (s *sim) at() time.Time { return epoch.Add(s.now) }

// heldScratch is answerHoldings' reused buffers.
type heldScratch struct {
	matches flashindex.Matches
	chain   []kv.BlockHash
}
