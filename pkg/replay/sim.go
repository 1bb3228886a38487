package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/trace"
	"switchyard.dev/pkg/turns"
)

// epoch is virtual time zero, handed to the cores as a time.Time.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type evKind uint8

const (
	evStep  evKind = iota // a worker's step ends (and the next one starts)
	evTurn                // a session's tool gap is over
	evStart               // one of the first sessions joins
	evTick                // admission control tick
	evRetry               // a shed session's client tries again
	evHints               // hint emitter tick
	evWarm                // the warmup ends: the window opens
	evEnd                 // the window closes
)

type event struct {
	at   time.Duration
	seq  uint64 // FIFO among equal times: determinism
	kind evKind
	arg  int
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// pendingOut is the part of a step's output the simulator acts on.
type pendingOut struct {
	req    int32 // index into sim.reqs
	first  bool
	cached int
	finish bool
	usage  enginesim.Usage
}

type worker struct {
	id        string
	eng       *enginesim.Engine
	scheduled bool // an evStep is queued
	events    []kv.Event
	outs      []pendingOut
	// stepEnd is when the current step ends; stepBusy says it computes
	// (Stats.BusyTime counts it whole from its start).
	stepEnd  time.Duration
	stepBusy time.Duration
	// idleSince is when the engine ran out of work (its clock moves only
	// with steps: wake tells it how long it idled).
	idleSince time.Duration
	// seen is every prompt block sent to this worker: its cache were it
	// infinite.
	seen map[kv.BlockHash]struct{}
}

// inflight is one turn sent to an engine.
type inflight struct {
	session   int
	turn      int
	worker    int
	id        string
	sent      time.Duration // when the client sent it (before any admission wait)
	firstTok  time.Duration
	gotFirst  bool
	input     int
	output    int
	idealHit  int // prompt tokens an infinite cache would hold (see hashes)
	routedHit int // prompt tokens an infinite cache on its worker would hold
	clipped   bool
	active    bool
	waiting   bool
	admitted  time.Duration // when routing placed it on an engine
	waitStart time.Duration
}

// sessState is one instance of a trace session: a draw of a top-level
// session, or a sub-agent of one. Draws of the same trace session are
// separate instances with their own hash namespace.
type sessState struct {
	s        *trace.Session
	id       string // unique per instance: the trace id and the draw
	ns       uint64 // hash namespace of the draw
	parent   int    // instance index of the parent, -1 for a top-level draw
	started  time.Duration
	traceIdx int
	walk     trace.Walk // where it stands in its tree: the next turn, the sub-agents it waits for
	capHeld  bool       // holds a kv_cap slot
	partial  bool       // joined at a later turn: its time is no session's whole
	last     int        // worker of the last turn sent, -1 before the first
	context  int        // tokens of the last turn, prompt and output: what its next turn brings back
	key      admission.Key
	prevIDs  []uint64
	prevHash []kv.BlockHash
	waiter   *admission.Waiter
	parked   int // index into sim.reqs of the turn waiting for admission, -1 none
}

// start is where one of the first draws joins the run: at a turn, with
// what is left of its tool gap.
type start struct {
	draw, traceIdx, turn int
	gapLeft              time.Duration
}

type sim struct {
	cfg      Config
	w        *trace.Workload
	now      time.Duration
	seq      uint64
	q        eventQueue
	workers  []*worker
	byID     map[string]int
	ix       *flashindex.Index
	pool     *kvpool.Store         // nil without a shared pool
	poolIx   *flashindex.PoolIndex // follows pool's events
	hints    *hintLoop             // nil without hints
	pipe     *turns.Pipeline       // the scheduler's decisions, as the live service makes them
	ctrl     *admission.Controller // pipe's, nil without admission control
	capper   *admission.SessionCap // kv_cap
	capWait  map[admission.Key]int // sessions waiting for a kv_cap slot → instance
	sessions []sessState
	reqs     []inflight
	parked   []int // sessions with a turn waiting for admission
	prompt   []uint32
	matches  flashindex.Matches
	cands    []routing.Candidate
	match    map[string]flashindex.WorkerMatch
	seen     map[kv.BlockHash]struct{} // every prompt block sent so far: the infinite cache
	reqByID  map[string]int32          // engine outputs name requests by id

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
	s := &sim{cfg: cfg, w: w, byID: make(map[string]int), ix: flashindex.New(flashindex.Config{}),
		match: make(map[string]flashindex.WorkerMatch), seen: make(map[kv.BlockHash]struct{}), reqByID: make(map[string]int32),
		drawRNG: rand.New(rand.NewPCG(uint64(cfg.Seed), 0xd7a3)), end: cfg.Warmup + cfg.Window,
		win: &window{start: cfg.Warmup, end: cfg.Warmup + cfg.Window}}
	if s.pool0 = SplitSessions(w, cfg.Split); len(s.pool0) == 0 {
		return Result{}, fmt.Errorf("replay: workload %q has no top-level session in split %q", w.Name, cfg.Split)
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
	s.pipe, err = turns.New(turns.Config{Routing: rc, Admission: cfg.Policy.admission(cfg.Admission),
		Rand: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))})
	if err != nil {
		return Result{}, err
	}
	s.ctrl = s.pipe.Controller()
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
		s.pipe.SetWorker(ec.WorkerID, []int64{int64(ecfg.NumGPUBlocks) * bs, int64(ecfg.HostBlocks) * bs, int64(ecfg.DiskBlocks) * bs}, ecfg.MaxNumSeqs)
	}
	ecfg := s.workers[0].eng.Config()
	s.engineBlock = ecfg.BlockSize
	// Every policy sends the same prompts: the oracle's are clipped to the
	// cache the others have.
	s.maxInput = cfg.Engine.NumGPUBlocks * s.engineBlock
	if m := ecfg.Model.MaxModelLen; m > 0 {
		s.maxInput = min(s.maxInput, m)
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
	s.push(s.tickInterval(), evTick, 0)
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

// drawSession returns the workload index of the next draw: the draws are
// one seeded sequence, the same for every policy.
func (s *sim) drawSession() int { return s.pool0[s.drawRNG.IntN(len(s.pool0))] }

// joinRunningFleet starts the first C sessions as a measurement of a fleet
// already running would find them, not all at their first turn in one
// instant: a session active at a random moment is one drawn in proportion
// to its duration, at a uniformly random point of it. So each is drawn with
// probability proportional to its time alone and joins at the turn a
// uniform point of that time falls in, sent when what is left of its tool
// gap has passed (so the first turns are spread over their cycles); its
// earlier turns are not replayed, and its first turn finds the cache cold,
// as at the start of any measurement. The sessions drawn later, as sessions
// end, start at their first turn (a closed loop).
func (s *sim) joinRunningFleet() {
	cum := make([]float64, len(s.pool0))
	var total float64
	for i, ti := range s.pool0 {
		total += float64(s.alone.session(ti))
		cum[i] = total
	}
	for range s.cfg.Concurrency {
		x := s.drawRNG.Float64() * total
		i := sort.SearchFloat64s(cum, x)
		ti := s.pool0[min(i, len(s.pool0)-1)]
		turn, gapLeft := s.alone.joinAt(ti, s.drawRNG.Float64())
		s.starting = append(s.starting, start{draw: s.draws, traceIdx: ti, turn: turn, gapLeft: gapLeft})
		s.draws++
		s.pending++
		s.push(0, evStart, len(s.starting)-1)
	}
}

func (s *sim) push(at time.Duration, k evKind, arg int) {
	s.seq++
	heap.Push(&s.q, event{at: at, seq: s.seq, kind: k, arg: arg})
}

func (s *sim) loop() error {
	var stalled int
	for n := 0; s.q.Len() > 0 && !s.stopped; n++ {
		if s.cfg.Done != nil && n&4095 == 0 {
			select {
			case <-s.cfg.Done:
				return ErrAborted
			default:
			}
		}
		e := heap.Pop(&s.q).(event)
		s.now = e.at
		if p := s.cfg.Progress; p != nil && s.now-s.lastProg >= time.Second {
			s.lastProg = s.now
			p(s.now, s.end)
		}
		switch e.kind {
		case evStep:
			if err := s.step(e.arg, &stalled); err != nil {
				return err
			}
		case evTurn:
			s.follow(e.arg, s.sessions[e.arg].walk.GapDone(), ownGap)
		case evStart:
			st := s.starting[e.arg]
			s.pending--
			s.startTop(st.draw, st.traceIdx, st.turn, st.gapLeft)
		case evTick:
			rep := s.pipe.Tick(s.at()).Admission
			s.win.paused(rep.Paused)
			s.observeAdmission(rep.Events)
			s.wake()
			s.push(s.now+s.tickInterval(), evTick, 0)
		case evRetry:
			if ri := s.sessions[e.arg].parked; ri >= 0 {
				s.dispatch(ri)
			}
		case evHints:
			s.decideHints()
			s.push(s.now+s.hints.tick, evHints, 0)
		case evWarm:
			s.openWindow()
		case evEnd:
			s.closeWindow()
			s.stopped = true
		}
	}
	if !s.stopped {
		return fmt.Errorf("replay: stuck at %v with %d sessions active (%d parked)", s.now, s.active, len(s.parked))
	}
	return nil
}

func (s *sim) at() time.Time { return epoch.Add(s.now) }

// tickInterval is how often the scheduler's control step runs: admission's
// tick, or the scheduler's default without admission control.
func (s *sim) tickInterval() time.Duration {
	if s.ctrl != nil {
		return s.ctrl.Config().TickInterval
	}
	return admission.DefaultConfig().TickInterval
}

// startTop starts draw d of top-level session ti now: at its first turn, or
// at a later one with what is left of its gap (joining mid-way).
func (s *sim) startTop(d, ti, turn int, gapLeft time.Duration) {
	s.active++
	s.startSessionAt(ti, -1, uint64(d+1)<<24, turn, gapLeft)
}

// startSession starts an instance of trace session ti under the draw's
// namespace ns (sub-agents share their draw's).
func (s *sim) startSession(ti, parent int, ns uint64) { s.startSessionAt(ti, parent, ns, 0, ownGap) }

// ownGap asks startSessionAt for the turn's own gap.
const ownGap time.Duration = -1

// startSessionAt starts it at one of its turns, after gap (ownGap: the
// turn's). A session joining the measurement mid-way is partial: no
// slowdown is measured for it.
func (s *sim) startSessionAt(ti, parent int, ns uint64, turn int, gap time.Duration) {
	ts := s.w.Sessions[ti]
	// A draw's sessions are named after the trace's, with the draw number
	// after the top-level id (trace_0042@7, trace_0042@7/agent_001).
	id := ts.ID + "@" + strconv.FormatUint(ns>>24, 10)
	if parent >= 0 {
		suffix := "/" + ts.ID
		if pid := s.w.Sessions[ts.Parent].ID; strings.HasPrefix(ts.ID, pid) {
			suffix = ts.ID[len(pid):]
		}
		id = s.sessions[parent].id + suffix
	}
	i := len(s.sessions)
	s.sessions = append(s.sessions, sessState{s: ts, id: id, ns: ns, parent: parent, started: s.now, traceIdx: ti,
		parked: -1, last: -1, key: admission.Key{SessionID: id}, walk: trace.NewWalk(ts, turn, len(ts.Turns)), partial: turn > 0})
	s.follow(i, s.sessions[i].walk.Start(), gap)
}

// follow does what session i's walk says comes next: it starts the
// sub-agents, then waits the gap (gap, or ownGap for the turn's own
// capped one), sends the turn or ends the session. A sub-agent may end as
// it starts (one with nothing to send) and move its parent's walk on: i's
// state is read afresh after the starts, never through a pointer held
// across them (they grow s.sessions).
func (s *sim) follow(i int, nx trace.Next, gap time.Duration) {
	ns := s.sessions[i].ns
	for _, c := range nx.Start {
		s.startSession(c, i, ns)
	}
	switch nx.Do {
	case trace.WaitGap:
		if gap == ownGap {
			gap = s.gap(&s.sessions[i].s.Turns[nx.Turn])
		}
		s.push(s.now+gap, evTurn, i)
	case trace.SendTurn:
		s.send(i, nx.Turn)
	case trace.EndSession:
		s.endSession(i)
	}
}

func (s *sim) gap(t *trace.Turn) time.Duration {
	if s.cfg.MaxGap > 0 && t.Gap > s.cfg.MaxGap {
		return s.cfg.MaxGap
	}
	return t.Gap
}

// endSession ends session i once its walk says so: after its last turn
// and its tail sub-agents.
func (s *sim) endSession(i int) {
	ss := &s.sessions[i]
	s.win.setContext(s.now, ss, 0)
	ss.prevIDs, ss.prevHash = nil, nil
	s.observeAdmission(s.pipe.EndSession(s.at(), ss.key))
	s.wake()
	s.observe(ss, hints.PhaseActing, hints.LifecycleTerminated, "")
	if p := ss.parent; p >= 0 {
		s.follow(p, s.sessions[p].walk.ChildDone(), ownGap)
		return
	}
	if ss.capHeld {
		ss.capHeld = false
		for _, k := range s.capper.Release(ss.key) {
			wi := s.capWait[k]
			delete(s.capWait, k)
			s.sessions[wi].capHeld = true
			s.dispatch(s.sessions[wi].parked)
		}
	}
	s.win.sessionEnded(s, ss)
	s.active--
	d := s.draws
	s.draws++
	s.startTop(d, s.drawSession(), 0, ownGap)
}

// send issues session i's turn (the one its walk says is next):
// admission, then routing over the index's overlaps, then the engine.
func (s *sim) send(i, turn int) {
	ss := &s.sessions[i]
	t := &ss.s.Turns[turn]
	r := inflight{session: i, turn: turn, sent: s.now, active: true}
	r.input, r.output = s.clip(t)
	r.clipped = r.input < t.InputLen
	s.reqs = append(s.reqs, r)
	s.dispatch(len(s.reqs) - 1)
}

// clip is the prompt and output a turn sends: prompts longer than the
// model's context (or the cache) less the output keep their first tokens.
func (s *sim) clip(t *trace.Turn) (input, output int) {
	input, output = t.InputLen, max(t.OutputLen, 1)
	if limit := s.maxInput - output - 1; input > limit {
		input = max(limit, 1)
	}
	return input, output
}

// park holds a turn back (admission says wait), counting its wait from the
// first time.
func (s *sim) park(ri int) {
	r := &s.reqs[ri]
	if !r.waiting {
		r.waiting, r.waitStart = true, s.now
		s.win.waitStarted(s.now)
	}
	s.sessions[r.session].parked = ri
}

func (s *sim) dispatch(ri int) {
	r := &s.reqs[ri]
	ss := &s.sessions[r.session]
	t := &ss.s.Turns[r.turn]
	if s.capper != nil && ss.parent < 0 && !ss.capHeld {
		if !s.capper.Admit(ss.key) {
			s.capWait[ss.key] = r.session
			s.park(ri)
			return
		}
		ss.capHeld = true
	}
	parent := ""
	if p := ss.parent; p >= 0 {
		parent = s.sessions[p].id
	}
	turn := turns.Turn{RequestID: ss.id + "#" + strconv.Itoa(r.turn), Key: ss.key, ParentSessionID: parent,
		PromptTokens: r.input, BlockSize: s.engineBlock}
	a := s.pipe.Admit(s.at(), turn, ss.waiter)
	s.observeAdmission(a.Events)
	ss.waiter = nil
	switch a.Verdict {
	case admission.Wait:
		s.parked = append(s.parked, r.session)
		ss.waiter = a.Waiter
		s.park(ri)
		return
	case admission.Shed:
		s.win.shed()
		s.park(ri)
		s.push(s.now+a.RetryAfter, evRetry, r.session)
		return
	}
	if r.waiting {
		s.win.waited(r.waitStart, s.now)
		r.waiting = false
	}
	ss.parked = -1
	hashes, reuse, ideal := s.hashes(ss, t, r.input, ri)
	r.idealHit = ideal
	turn.Blocks = len(hashes)
	r.id = turn.RequestID
	d, err := s.pipe.Place(s.at(), turn, a, s.candidates(hashes))
	if err != nil {
		panic(err) // unreachable: every worker is a candidate
	}
	s.observeAdmission(d.Events)
	s.observe(ss, hints.PhaseReasoning, hints.LifecycleActive, d.Worker)
	wi := s.byID[d.Worker]
	r.worker, r.admitted = wi, s.now
	w := s.workers[wi]
	r.routedHit = s.routedIdeal(ss, w, wi, hashes, reuse, r.input)
	if err := w.eng.Add(enginesim.Request{ID: r.id, SessionID: ss.id, Prompt: s.prompt[:r.input],
		BlockHashes: hashes, MaxTokens: r.output, OutputLen: r.output, IgnoreEOS: true, Priority: d.Priority}); err != nil {
		panic(fmt.Sprintf("replay: engine refused %s: %v", r.id, err)) // prompts are clipped to fit
	}
	s.reqByID[r.id] = int32(ri)
	if !w.scheduled {
		s.wakeWorker(w)
		w.scheduled = true
		s.push(s.now, evStep, wi)
	}
}

// candidates is every worker with its load and its overlap with the
// prompt, as the scheduler builds them from the registry and the flash
// indexer.
func (s *sim) candidates(hashes []kv.BlockHash) []routing.Candidate {
	s.ix.FindMatchesInto(&s.matches, hashes)
	clear(s.match)
	for _, m := range s.matches.Workers {
		s.match[m.Worker] = m
	}
	s.cands = s.cands[:0]
	for _, w := range s.workers {
		st := w.eng.Load()
		s.pipe.Reported(w.id) // read now: nothing finished since
		c := w.eng.Config()
		m, ok := s.match[w.id]
		if !ok {
			m.Shared = s.matches.PoolPrefix
		}
		s.cands = append(s.cands, routing.Candidate{
			Worker: w.id,
			Reported: routing.Load{RunningRequests: st.Running, WaitingRequests: st.Waiting,
				ActiveBlocks: st.UsedBlocks, CapacityTokens: int64(c.NumGPUBlocks+c.HostBlocks+c.DiskBlocks) * int64(c.BlockSize),
				MaxRunning: c.MaxNumSeqs},
			Overlap: routing.Overlap{Device: m.Device, HostExt: m.Host, DiskExt: m.Disk, SharedBeyondDevice: m.Shared},
		})
	}
	return s.cands
}

// step ends worker wi's current step (applying what it produced) and
// starts the next one.
func (s *sim) step(wi int, stalled *int) error {
	w := s.workers[wi]
	if err := s.applyWorkerEvents(w, w.events); err != nil {
		return err
	}
	w.events = w.events[:0]
	outs := w.outs
	w.outs = w.outs[len(w.outs):]
	for _, o := range outs {
		s.output(o)
	}
	w.outs = outs[:0]
	w.stepBusy = 0
	if !w.eng.HasWork() {
		w.scheduled, w.idleSince = false, s.now
		return nil
	}
	res := w.eng.Step()
	if res.PrefillTokens > 0 || res.DecodeRequests > 0 {
		w.stepBusy = res.Duration // a step that only waited for a load is idle
	}
	w.events = append(w.events, res.Events...)
	s.followPool()
	for _, o := range res.Outputs {
		if !o.First && o.Finish == enginesim.FinishNone {
			continue
		}
		ri, ok := s.reqByID[o.RequestID]
		if !ok {
			continue
		}
		p := pendingOut{req: ri, first: o.First, cached: o.CachedTokens, finish: o.Finish != enginesim.FinishNone}
		if o.Usage != nil {
			p.usage = *o.Usage
		}
		w.outs = append(w.outs, p)
	}
	d := res.Duration
	if d <= 0 {
		// Nothing could be scheduled this iteration; the engine has work,
		// so something must free up on its own. Guard against a livelock.
		*stalled++
		if *stalled > 1_000_000 {
			return fmt.Errorf("replay: worker %s makes no progress at %v", w.id, s.now)
		}
		d = time.Microsecond
	} else {
		*stalled = 0
	}
	w.stepEnd = s.now + d
	s.push(w.stepEnd, evStep, wi)
	return nil
}

// wakeWorker tells an idle worker's engine how long it idled, before it
// books copies (a step's loads, a hint's).
func (s *sim) wakeWorker(w *worker) {
	if !w.scheduled {
		w.eng.Advance(s.now - w.idleSince)
		w.idleSince = s.now
	}
}

// applyWorkerEvents feeds a worker's KV events to the flash index (and the
// session-prefix index when hints are on).
func (s *sim) applyWorkerEvents(w *worker, evs []kv.Event) error {
	for _, ev := range evs {
		if err := s.ix.Apply(w.id, 0, ev); err != nil && !errors.Is(err, flashindex.ErrBadEvent) {
			return err
		}
	}
	s.followLineage(w.id, evs)
	return nil
}

// followPool hands the shared pool's new events to its index at once: the
// pool is one store, so its stream is applied in its own order, not delayed
// with the writing engine's step like the engines' own events.
func (s *sim) followPool() {
	if s.pool == nil {
		return
	}
	if evs := s.pool.TakeEvents(); len(evs) > 0 {
		s.poolIx.Apply(s.pool.Epoch(), evs)
	}
}

func (s *sim) output(o pendingOut) {
	r := &s.reqs[o.req]
	if o.first {
		r.firstTok, r.gotFirst = s.now, true
		s.pipe.MarkPrefillDone(r.id)
		s.win.firstToken(s.now, r.sent)
	}
	if !o.finish {
		return
	}
	delete(s.reqByID, r.id)
	r.active = false
	ss := &s.sessions[r.session]
	_, evs := s.pipe.Finish(s.at(), r.id, ss.key, turns.Ended{PromptTokens: o.usage.PromptTokens, CompletionTokens: o.usage.CompletionTokens})
	s.win.turnDone(s, r, o.usage)
	s.win.setContext(s.now, ss, o.usage.PromptTokens+o.usage.CompletionTokens)
	s.observeAdmission(evs)
	s.wake()
	s.observe(ss, hints.PhaseActing, hints.LifecycleActive, s.workers[r.worker].id)
	if s.cfg.OnTurn != nil {
		s.cfg.OnTurn(s.turnResult(r, o.usage))
	}
	s.follow(r.session, s.sessions[r.session].walk.TurnDone(), ownGap)
}

// wake re-admits every parked turn whose waiter fired.
func (s *sim) wake() {
	if len(s.parked) == 0 {
		return
	}
	keep := s.parked[:0]
	var ready []int
	for _, i := range s.parked {
		ss := &s.sessions[i]
		select {
		case <-ss.waiter.Ready():
			ready = append(ready, i)
		default:
			keep = append(keep, i)
		}
	}
	s.parked = keep
	for _, i := range ready {
		if ri := s.sessions[i].parked; ri >= 0 {
			s.dispatch(ri)
		}
	}
}

// hashes returns the engine block hashes of a turn's prompt (its first
// input tokens), how many lead the session's previous prompt shares, and
// how many of its tokens an infinite cache would hold: the leading blocks
// any earlier turn sent, up to the last full block before the prompt's end
// (an engine always computes at least one token).
// Trace ids are expanded into engine blocks: the engine block ending at
// token e is named by the trace id that covers token e, e's offset in it
// and the draw's namespace, so equal id prefixes of one draw give equal
// hash prefixes and two draws share nothing; tokens past the trace ids are
// unique to the turn (salt).
func (s *sim) hashes(ss *sessState, t *trace.Turn, input, salt int) (out []kv.BlockHash, reuse, ideal int) {
	tb, eb := s.w.BlockSize, s.engineBlock
	n := input / eb
	ids := t.Blocks
	lcp := 0
	for lcp < len(ids) && lcp < len(ss.prevIDs) && ids[lcp] == ss.prevIDs[lcp] {
		lcp++
	}
	// Engine blocks fully inside the common trace prefix are reusable.
	reuse = min(lcp*tb/eb, len(ss.prevHash), n)
	out = make([]kv.BlockHash, n)
	copy(out, ss.prevHash[:reuse])
	var parent kv.BlockHash
	if reuse > 0 {
		parent = out[reuse-1]
	}
	tail := uint64(salt)*0x9e3779b97f4a7c15 ^ 0xabcdef
	for k := reuse; k < n; k++ {
		end := (k+1)*eb - 1
		var local uint64
		if b := end / tb; b < len(ids) {
			local = mix(ids[b], uint64(end%tb)|ss.ns)
		} else {
			local = mix(tail, uint64(k)) // unhashed tail: this turn's own
		}
		if k == 0 {
			parent = kvhash.Root(kv.LocalHash(local))
		} else {
			parent = kvhash.Chain(parent, kv.LocalHash(local))
		}
		out[k] = parent
	}
	// The infinite cache holds the session's previous prompt and whatever
	// else was sent before.
	hit := reuse
	for hit < n {
		if _, ok := s.seen[out[hit]]; !ok {
			break
		}
		hit++
	}
	for _, h := range out[reuse:] {
		s.seen[h] = struct{}{}
	}
	ss.prevIDs, ss.prevHash = ids, out
	return out, reuse, min(hit, (input-1)/eb) * eb
}

// routedIdeal is how many of a turn's prompt tokens worker w would hold were
// its cache infinite: the leading blocks sent to it before. What it lacks of
// the fleet-wide ideal was lost to routing; what the engine lacks of it, to
// eviction.
func (s *sim) routedIdeal(ss *sessState, w *worker, wi int, hashes []kv.BlockHash, reuse, input int) int {
	start := 0
	if ss.last == wi {
		start = reuse // the session's previous prompt went here
	}
	ss.last = wi
	hit := start
	for hit < len(hashes) {
		if _, ok := w.seen[hashes[hit]]; !ok {
			break
		}
		hit++
	}
	for _, h := range hashes[start:] {
		w.seen[h] = struct{}{}
	}
	return min(hit, (input-1)/s.engineBlock) * s.engineBlock
}

func mix(a, b uint64) uint64 {
	var buf [16]byte
	for i := range 8 {
		buf[i] = byte(a >> (8 * i))
		buf[8+i] = byte(b >> (8 * i))
	}
	return xxh3.Hash(buf[:])
}
