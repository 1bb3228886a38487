package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
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
)

// epoch is virtual time zero, handed to the cores as a time.Time.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type evKind uint8

const (
	evStep  evKind = iota // a worker's step ends (and the next one starts)
	evTurn                // a session's tool gap is over
	evTick                // admission control tick
	evHints               // hint emitter tick
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
}

// inflight is one turn sent to an engine.
type inflight struct {
	session   int
	turn      int
	worker    int
	id        string
	sent      time.Duration // when the client sent it (before any admission wait)
	firstTok  time.Duration
	input     int
	output    int
	idealHit  int // tokens of the prompt the session itself computed before
	clipped   bool
	active    bool
	waiting   bool
	admitted  time.Duration // when routing placed it on an engine
	waitStart time.Duration
}

type sessState struct {
	s        *trace.Session
	root     int // top-level ancestor
	next     int // index of the turn to send next
	kids     int // children still running that the next step waits for
	gapDone  bool
	tail     bool // turns done; waiting for tail children
	done     bool
	key      admission.Key
	prevIDs  []uint64
	prevHash []kv.BlockHash
	waiter   *admission.Waiter
	parked   int // index into sim.reqs of the turn waiting for admission, -1 none
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
	router   *routing.Router
	ctrl     *admission.Controller
	sessions []sessState
	reqs     []inflight
	parked   []int // sessions with a turn waiting for admission
	prompt   []uint32
	matches  flashindex.Matches
	cands    []routing.Candidate
	match    map[string]flashindex.WorkerMatch

	queue       []int // top-level sessions not started yet
	active      int
	topTotal    int
	topDone     int
	liveTicks   bool
	capTokens   int
	engineBlock int
	ratio       int // trace block / engine block when it divides, else 0

	m       metrics
	window  *windowSnap
	stopped bool
}

// Run replays the workload under cfg and returns its metrics.
func Run(w *trace.Workload, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if err := w.Validate(); err != nil {
		return Result{}, err
	}
	s := &sim{cfg: cfg, w: w, byID: make(map[string]int), ix: flashindex.New(flashindex.Config{}),
		match: make(map[string]flashindex.WorkerMatch)}
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
	rc.Policy = cfg.Policy
	rc.BlockSize = cfg.Engine.BlockSize
	s.router, err = routing.New(&rc, rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed)))
	if err != nil {
		return Result{}, err
	}
	if cfg.Hints != nil {
		s.hints = newHintLoop(*cfg.Hints)
	}
	if cfg.Policy == routing.PolicySessionAware {
		if s.ctrl, err = admission.New(cfg.Admission); err != nil {
			return Result{}, err
		}
	}
	for i := range cfg.Workers {
		ec := cfg.Engine
		ec.WorkerID = "w" + strconv.Itoa(i)
		ec.Seed = cfg.Seed*1000003 + int64(i)
		if s.pool != nil {
			ec.SharedPool = s.pool
		}
		eng, err := enginesim.New(ec)
		if err != nil {
			return Result{}, err
		}
		s.workers = append(s.workers, &worker{id: ec.WorkerID, eng: eng})
		s.byID[ec.WorkerID] = i
		if s.ctrl != nil {
			ecfg := eng.Config()
			bs := int64(ecfg.BlockSize)
			s.ctrl.SetWorker(ec.WorkerID, admission.Capacity{
				Tokens:      s.ctrl.Config().CountedTokens(int64(ecfg.NumGPUBlocks)*bs, int64(ecfg.HostBlocks)*bs, int64(ecfg.DiskBlocks)*bs),
				MaxPrograms: ecfg.MaxNumSeqs,
			})
		}
	}
	s.capTokens = s.workers[0].eng.CapacityTokens()
	s.engineBlock = s.workers[0].eng.Config().BlockSize
	if w.BlockSize%s.engineBlock == 0 {
		s.ratio = w.BlockSize / s.engineBlock
	}

	maxIn := 0
	s.sessions = make([]sessState, len(w.Sessions))
	for i, ss := range w.Sessions {
		s.sessions[i] = sessState{s: ss, root: i, parked: -1, key: admission.Key{SessionID: ss.ID}}
		for _, t := range ss.Turns {
			maxIn = max(maxIn, t.InputLen)
		}
	}
	for i, ss := range w.Sessions {
		r := i
		for n := 0; w.Sessions[r].Parent >= 0 && n < len(w.Sessions); n++ {
			r = w.Sessions[r].Parent
		}
		s.sessions[i].root = r
		if ss.Parent < 0 {
			if cfg.Sessions > 0 && len(s.queue) >= cfg.Sessions {
				continue
			}
			s.queue = append(s.queue, i)
		}
	}
	s.prompt = make([]uint32, min(maxIn, s.capTokens)+1)
	s.topTotal = len(s.queue)
	for s.active < cfg.Concurrency && len(s.queue) > 0 {
		s.startTop()
	}
	if s.ctrl != nil {
		s.liveTicks = true
		s.push(s.ctrl.Config().TickInterval, evTick, 0)
	}
	if s.hints != nil {
		s.push(s.hints.tick, evHints, 0)
	}
	if err := s.loop(); err != nil {
		return Result{}, err
	}
	return s.result(), nil
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
		switch e.kind {
		case evStep:
			if err := s.step(e.arg, &stalled); err != nil {
				return err
			}
		case evTurn:
			ss := &s.sessions[e.arg]
			ss.gapDone = true
			if ss.kids == 0 {
				s.send(e.arg)
			}
		case evTick:
			if !s.liveTicks {
				continue
			}
			rep := s.ctrl.Tick(s.at())
			s.m.pauses += rep.Paused
			s.observeAdmission(rep.Events)
			s.wake()
			if s.topDone < s.topTotal {
				s.push(s.now+s.ctrl.Config().TickInterval, evTick, 0)
			}
		case evHints:
			s.decideHints()
			if s.topDone < s.topTotal {
				s.push(s.now+s.hints.tick, evHints, 0)
			}
		}
	}
	if s.topDone < s.topTotal && !s.stopped {
		return fmt.Errorf("replay: stuck at %v with %d of %d sessions done (%d parked)", s.now, s.topDone, s.topTotal, len(s.parked))
	}
	return nil
}

func (s *sim) at() time.Time { return epoch.Add(s.now) }

// startTop starts the next queued top-level session now.
func (s *sim) startTop() {
	i := s.queue[0]
	s.queue = s.queue[1:]
	s.active++
	s.startSession(i)
}

func (s *sim) startSession(i int) {
	ss := &s.sessions[i]
	s.m.sessions++
	if len(ss.s.Turns) == 0 {
		s.afterTurns(i)
		return
	}
	s.beginStep(i)
}

// beginStep starts what precedes turn ss.next: its sub-agents and its gap.
func (s *sim) beginStep(i int) {
	ss := &s.sessions[i]
	t := &ss.s.Turns[ss.next]
	ss.gapDone = false
	ss.kids = len(t.Children)
	for _, c := range t.Children {
		s.startSession(c)
	}
	gap := t.Gap
	if s.cfg.MaxGap > 0 && gap > s.cfg.MaxGap {
		gap = s.cfg.MaxGap
	}
	s.push(s.now+gap, evTurn, i)
}

// afterTurns runs when a session's last turn completed: tail sub-agents,
// then the end of the session.
func (s *sim) afterTurns(i int) {
	ss := &s.sessions[i]
	ss.tail = true
	ss.kids = len(ss.s.Tail)
	for _, c := range ss.s.Tail {
		s.startSession(c)
	}
	if ss.kids == 0 {
		s.endSession(i)
	}
}

func (s *sim) endSession(i int) {
	ss := &s.sessions[i]
	ss.done = true
	ss.prevIDs, ss.prevHash = nil, nil
	if s.ctrl != nil {
		evs, _ := s.ctrl.Release(s.at(), ss.key)
		s.observeAdmission(evs)
		s.wake()
	}
	s.observe(ss, hints.PhaseActing, hints.LifecycleTerminated, "")
	s.router.EndSession(ss.s.ID)
	if p := ss.s.Parent; p >= 0 {
		ps := &s.sessions[p]
		ps.kids--
		if ps.kids == 0 {
			if ps.tail {
				s.endSession(p)
			} else if ps.gapDone {
				s.send(p)
			}
		}
		return
	}
	s.active--
	s.topDone++
	if s.cfg.Progress != nil {
		s.cfg.Progress(s.topDone, s.topTotal)
	}
	if len(s.queue) > 0 {
		s.startTop()
		return
	}
	if s.window == nil {
		// The first session that cannot be replaced ends the steady state.
		s.snapWindow()
		if s.cfg.SteadyOnly {
			s.stopped = true
		}
	}
}

// send issues session i's next turn: admission (session_aware), then
// routing over the index's overlaps, then the engine.
func (s *sim) send(i int) {
	ss := &s.sessions[i]
	t := &ss.s.Turns[ss.next]
	r := inflight{session: i, turn: ss.next, sent: s.now, input: t.InputLen, output: max(t.OutputLen, 1), active: true}
	if limit := s.capTokens - r.output - 1; r.input > limit {
		r.input, r.clipped = max(limit, 1), true
		s.m.clipped++
	}
	s.reqs = append(s.reqs, r)
	s.dispatch(len(s.reqs) - 1)
}

func (s *sim) dispatch(ri int) {
	r := &s.reqs[ri]
	ss := &s.sessions[r.session]
	t := &ss.s.Turns[r.turn]
	var pin string
	var room []string
	if s.ctrl != nil {
		parent := ""
		if p := ss.s.Parent; p >= 0 {
			parent = s.w.Sessions[p].ID
		}
		a := s.ctrl.Admit(s.at(), admission.Turn{Key: ss.key, ParentSessionID: parent, PromptTokens: int64(r.input)}, ss.waiter)
		s.observeAdmission(a.Events)
		ss.waiter = nil
		if a.Verdict == admission.Wait {
			if !r.waiting {
				r.waiting, r.waitStart = true, s.now
				s.m.waits++
			}
			s.parked = append(s.parked, r.session)
			ss.waiter, ss.parked = a.Waiter, ri
			return
		}
		if r.waiting {
			s.m.pauseTime += s.now - r.waitStart
			r.waiting = false
		}
		pin, room = a.Worker, a.Room
	}
	hashes, ideal := s.hashes(ss, t, r.input)
	r.idealHit = ideal
	s.ix.FindMatchesInto(&s.matches, hashes)
	clear(s.match)
	for _, m := range s.matches.Workers {
		s.match[m.Worker] = m
	}
	s.cands = s.cands[:0]
	for _, w := range s.workers {
		if room != nil && !contains(room, w.id) {
			continue
		}
		st := w.eng.Stats()
		c := w.eng.Config()
		m, ok := s.match[w.id]
		if !ok {
			m.Shared = s.matches.PoolPrefix
		}
		s.cands = append(s.cands, routing.Candidate{
			Worker: w.id,
			Reported: routing.Load{RunningRequests: st.Running, WaitingRequests: st.Waiting,
				ActiveBlocks: st.Tiers[kv.TierDevice].Used, CapacityTokens: int64(c.NumGPUBlocks+c.HostBlocks+c.DiskBlocks) * int64(c.BlockSize),
				MaxRunning: c.MaxNumSeqs},
			Overlap: routing.Overlap{Device: m.Device, HostExt: m.Host, DiskExt: m.Disk, SharedBeyondDevice: m.Shared},
		})
	}
	if len(s.cands) == 0 { // admission named no worker with room: any will do
		for _, w := range s.workers {
			s.cands = append(s.cands, routing.Candidate{Worker: w.id})
		}
	}
	r.id = ss.s.ID + "#" + strconv.Itoa(r.turn)
	parent := ""
	if p := ss.s.Parent; p >= 0 {
		parent = s.w.Sessions[p].ID
	}
	d, err := s.router.Route(s.at(), routing.Request{ID: r.id, SessionID: ss.s.ID, ParentSessionID: parent,
		ISLTokens: r.input, Blocks: len(hashes), BlockSize: s.engineBlock}, s.cands, pin)
	if err != nil {
		panic(err) // unreachable: there is always a candidate
	}
	if s.ctrl != nil {
		s.observeAdmission(s.ctrl.Placed(s.at(), ss.key, d.Worker))
	}
	s.observe(ss, hints.PhaseReasoning, hints.LifecycleActive, d.Worker)
	wi := s.byID[d.Worker]
	r.worker, r.admitted = wi, s.now
	w := s.workers[wi]
	if err := w.eng.Add(enginesim.Request{ID: r.id, SessionID: ss.s.ID, Prompt: s.prompt[:r.input],
		BlockHashes: hashes, MaxTokens: r.output, OutputLen: r.output, IgnoreEOS: true}); err != nil {
		panic(fmt.Sprintf("replay: engine refused %s: %v", r.id, err)) // prompts are clipped to fit
	}
	s.inflightByID(r.id, ri)
	if !w.scheduled {
		w.scheduled = true
		s.push(s.now, evStep, wi)
	}
}

// inflight ids: engine outputs name requests by id.
func (s *sim) inflightByID(id string, ri int) {
	if s.m.byReq == nil {
		s.m.byReq = make(map[string]int32)
	}
	s.m.byReq[id] = int32(ri)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
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
	if !w.eng.HasWork() {
		w.scheduled = false
		return nil
	}
	res := w.eng.Step()
	w.events = append(w.events, res.Events...)
	s.followPool()
	for _, o := range res.Outputs {
		if !o.First && o.Finish == enginesim.FinishNone {
			continue
		}
		ri, ok := s.m.byReq[o.RequestID]
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
	s.push(s.now+d, evStep, wi)
	return nil
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
		r.firstTok = s.now
		s.router.MarkPrefillDone(r.id)
		s.m.ttft = append(s.m.ttft, float64(s.now-r.sent)/1e6)
	}
	if !o.finish {
		return
	}
	delete(s.m.byReq, r.id)
	r.active = false
	s.router.Finish(s.at(), r.id)
	u := o.usage
	s.m.turns++
	s.m.promptTokens += int64(u.PromptTokens)
	s.m.cachedTokens += int64(u.CachedTokens)
	for t, n := range u.CachedByTier {
		s.m.cachedByTier[t] += int64(n)
	}
	s.m.outputTokens += int64(u.CompletionTokens)
	s.m.idealTokens += int64(min(r.idealHit, u.PromptTokens))
	if miss := r.idealHit - u.CachedTokens; miss > 0 {
		s.m.evictedReprefill += int64(miss)
	}
	if u.CompletionTokens > 1 {
		s.m.itl = append(s.m.itl, float64(s.now-r.firstTok)/1e6/float64(u.CompletionTokens-1))
	}
	ss := &s.sessions[r.session]
	if s.ctrl != nil {
		s.observeAdmission(s.ctrl.Finish(s.at(), ss.key, int64(u.PromptTokens), int64(u.CompletionTokens)))
		s.wake()
	}
	s.observe(ss, hints.PhaseActing, hints.LifecycleActive, s.workers[r.worker].id)
	if s.cfg.OnTurn != nil {
		s.cfg.OnTurn(s.turnResult(r, u))
	}
	ss.next++
	if ss.next < len(ss.s.Turns) {
		s.beginStep(r.session)
	} else {
		s.afterTurns(r.session)
	}
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
		ss := &s.sessions[i]
		if ri := ss.parked; ri >= 0 {
			ss.parked = -1
			s.dispatch(ri)
		}
	}
}

// hashes returns the engine block hashes of a turn's prompt (its first
// input tokens) and how many of its tokens the session had already computed
// in its previous turn (the ideal prefix hit). Trace ids are expanded into
// engine blocks: the engine block ending at token e is named by the trace
// id that covers token e and e's offset in it, so equal id prefixes give
// equal hash prefixes; tokens past the trace ids are unique to the turn.
func (s *sim) hashes(ss *sessState, t *trace.Turn, input int) ([]kv.BlockHash, int) {
	tb, eb := s.w.BlockSize, s.engineBlock
	n := input / eb
	ids := t.Blocks
	lcp := 0
	for lcp < len(ids) && lcp < len(ss.prevIDs) && ids[lcp] == ss.prevIDs[lcp] {
		lcp++
	}
	// Engine blocks fully inside the common trace prefix are reusable.
	reuse := min(lcp*tb/eb, len(ss.prevHash), n)
	// A partial last trace block (Mooncake) differs once extended: only
	// full trace blocks of the common prefix are truly shared.
	ideal := min(lcp*tb, input)
	out := make([]kv.BlockHash, n)
	copy(out, ss.prevHash[:reuse])
	var parent kv.BlockHash
	if reuse > 0 {
		parent = out[reuse-1]
	}
	salt := uint64(len(s.reqs))*0x9e3779b97f4a7c15 ^ 0xabcdef
	for k := reuse; k < n; k++ {
		end := (k+1)*eb - 1
		var local uint64
		if b := end / tb; b < len(ids) {
			local = mix(ids[b], uint64(end%tb))
		} else {
			local = mix(salt, uint64(k)) // unhashed tail: this turn's own
		}
		if k == 0 {
			parent = kvhash.Root(kv.LocalHash(local))
		} else {
			parent = kvhash.Chain(parent, kv.LocalHash(local))
		}
		out[k] = parent
	}
	ss.prevIDs, ss.prevHash = ids, out
	return out, ideal
}

func mix(a, b uint64) uint64 {
	var buf [16]byte
	for i := range 8 {
		buf[i] = byte(a >> (8 * i))
		buf[8+i] = byte(b >> (8 * i))
	}
	return xxh3.Hash(buf[:])
}
