package admission

import (
	"errors"
	"math"
	"slices"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// ErrUnknownProgram means no program has that key.
var ErrUnknownProgram = errors.New("admission: unknown program")

// Capacity is what admission control packs programs against on one worker.
type Capacity struct {
	// Tokens of KV the worker retains, offload tiers included; 0 = unknown
	// (the worker is never considered full).
	Tokens int64
	// MaxPrograms is the most REASONING programs it runs at once (the
	// engine's max running requests); 0 = unknown.
	MaxPrograms int
	// ColdSlots is how many cold-lane turns this controller may run on the
	// worker at once: 0 = Config.ColdLane, negative = none (a controller
	// sharing the worker whose slots the other replicas hold: shareOf).
	ColdSlots int
	// WholeTokens is the whole worker's Tokens when Tokens is a share of it
	// (Share); 0 = Tokens is the whole. The oversized resume's cap is the
	// whole's: capped against a share, every large program counted as a
	// share's worth, resumed, overfilled the worker and was paused again at
	// the next tick (replicas' hit rate fell to 0.001; docs/scale-out.md).
	WholeTokens int64
	// ResumeTokens is what the resume step packs against, and new
	// programs are admitted against, when Tokens is a share: the room
	// below the resume ceiling goes where paused programs ask for it
	// (shareOf); 0 = Tokens.
	ResumeTokens int64
}

// resumeTokens is the KV in tokens the resume step packs against.
func (cp Capacity) resumeTokens() int64 {
	if cp.ResumeTokens > 0 {
		return cp.ResumeTokens
	}
	return cp.Tokens
}

// whole is the worker's whole KV in tokens.
func (cp Capacity) whole() int64 {
	if cp.WholeTokens > 0 {
		return cp.WholeTokens
	}
	return cp.Tokens
}

// workerState is one worker's capacity and the running sums of the ACTIVE
// programs placed on it, kept up to date on every change so that admission
// never scans the table on the request path.
type workerState struct {
	cap             Capacity
	reasoningTokens int64
	actingTokens    int64
	active          int
	reasoning       int
	marked          int // REASONING programs marked for pause
	cold            int // cold-lane turns running (coldlane.go)
	claimed         int // cold-lane slots held for woken turns
	// sharing: cap is a share of the worker (SetShares), nil: the whole.
	sharing *sharing
	// shareStale: the worker's own use changed since SetShares last
	// computed its share (shareMemo.stale lists it).
	shareStale   bool
	demotedUntil time.Time
	// recent holds the ACTING programs on the worker that entered their
	// tool call less than recentHorizon ago: the only ones whose decayed
	// tokens are not negligible (see decayed).
	recent map[*Program]time.Time
}

// used is the pause-side use: REASONING tokens, weighted ACTING tokens and a
// buffer per ACTIVE program.
func (w *workerState) used(cfg *Config) float64 {
	return float64(w.reasoningTokens) + cfg.ActingTokenWeight*float64(w.actingTokens) +
		float64(cfg.BufferPerProgram)*float64(w.active)
}

func (w *workerState) util(cfg *Config) float64 {
	if w.cap.Tokens <= 0 {
		return 0
	}
	return w.used(cfg) / float64(w.cap.Tokens)
}

func (w *workerState) countUtil() float64 {
	if w.cap.MaxPrograms <= 0 {
		return 0
	}
	return float64(w.reasoning) / float64(w.cap.MaxPrograms)
}

// Controller owns the program table and applies the policy.
type Controller struct {
	cfg     Config
	db      *memdb.MemDB
	workers map[string]*workerState
	ids     []string // worker ids, sorted
	q       queues
	seq     uint64
	counts  [4][3]int // [Lifecycle][Phase] → programs
	// wtxn is the write transaction of the call in progress, opened on the
	// first index change and committed when the call returns.
	wtxn *memdb.Txn
	// resumedNow holds the programs resumed by the tick in progress.
	resumedNow map[string]bool
	// paused holds the PAUSED programs: the tick's resume step reads them
	// without scanning the table.
	paused map[string]*Program
	// idle and ended are time-ordered queues of (program, stamp): the tick
	// pops what is due instead of scanning every program. An entry whose
	// program moved on since is stale and skipped.
	idle, ended stampQueue
	// pausedTokens is the PAUSED programs' working sets, fleetCapacity the
	// workers' counted capacity (whole, not this replica's shares of it);
	// peersPaused is what the other replicas' paused programs ask for, as
	// last heard (SetShares). Shedding compares the fleet's paused working
	// sets with the fleet.
	pausedTokens, fleetCapacity int64
	peersPaused                 float64
	gaps                        *GapModel
	// claims counts the cold-lane slots held for woken turns (each also
	// on its worker's claimed), coldTurns the worker of each turn running
	// cold, by request id (coldlane.go).
	claims    int
	coldTurns map[string]string
	// woken counts each program's turns the tick woke that have not come
	// back yet (Admit again, or Abandon): out of the queue, still the
	// program's, so no rule may release the program meanwhile.
	woken map[string]int
	// shares is what SetShares and demand keep between calls, so that a
	// replica's turn recomputes only what changed (share.go).
	shares shareMemo
}

type stamped struct {
	p  *Program
	at time.Time
}

// stampQueue is a FIFO of stamped programs, in the (non-decreasing) order
// of the controller's clock.
type stampQueue struct {
	items []stamped
	head  int
}

func (q *stampQueue) push(p *Program, at time.Time) { q.items = append(q.items, stamped{p, at}) }

// popDue removes and returns the entries stamped at or before cutoff.
func (q *stampQueue) popDue(cutoff time.Time) []stamped {
	start := q.head
	for q.head < len(q.items) && !q.items[q.head].at.After(cutoff) {
		q.head++
	}
	due := q.items[start:q.head]
	if q.head > 1024 && q.head*2 > len(q.items) {
		// Compact once half the backing array is consumed.
		due = append([]stamped(nil), due...)
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return due
}

// New returns a controller with an empty table; nil cfg means DefaultConfig().
func New(cfg *Config) (*Controller, error) {
	c := DefaultConfig()
	if cfg != nil {
		c = *cfg
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, err
	}
	return &Controller{cfg: c, db: db, workers: map[string]*workerState{}, q: newQueues(),
		paused: map[string]*Program{}, gaps: NewGapModel(c.DefaultGap), coldTurns: map[string]string{}, woken: map[string]int{}}, nil
}

// Config returns the controller's configuration.
func (c *Controller) Config() Config { return c.cfg }

// SetWorker adds a worker or updates its capacity, the whole worker's.
func (c *Controller) SetWorker(id string, cp Capacity) {
	c.setCapacity(id, cp)
	w := c.workers[id]
	if w.sharing != nil {
		w.sharing = nil
		c.shares.capGen++ // its resume ceiling is the whole one again
	}
	c.shareChanged(id, w)
}

func (c *Controller) setCapacity(id string, cp Capacity) {
	w := c.worker(id)
	c.fleetCapacity += cp.whole() - w.cap.whole()
	if cp.whole() != w.cap.whole() {
		c.shares.capGen++ // what an oversized program needs (resumeNeed)
	}
	w.cap = cp
}

// Gaps is the controller's model of the time programs stay away.
func (c *Controller) Gaps() *GapModel { return c.gaps }

func (c *Controller) worker(id string) *workerState {
	w := c.workers[id]
	if w == nil {
		w = &workerState{recent: map[*Program]time.Time{}}
		c.workers[id] = w
		c.shares.capGen++
		i := sort.SearchStrings(c.ids, id)
		c.ids = append(c.ids, "")
		copy(c.ids[i+1:], c.ids[i:])
		c.ids[i] = id
	}
	return w
}

// RemoveWorker forgets a worker that left the fleet. Its ACTIVE programs
// stay ACTIVE but unplaced: their next turn is placed afresh.
func (c *Controller) RemoveWorker(now time.Time, id string) []Event {
	defer c.commit()
	var events []Event
	for _, p := range c.onWorker(id) {
		c.update(p, func(p *Program) { p.Worker, p.MarkedForPause = "", false })
		events = append(events, c.event(now, p, ReasonUnplaced))
	}
	for t, w := range c.coldTurns {
		if w == id {
			delete(c.coldTurns, t) // its finish frees nothing: the worker's lane is gone
		}
	}
	if w, ok := c.workers[id]; ok {
		c.fleetCapacity -= w.cap.whole()
		c.shares.capGen++
		if w.shareStale {
			c.shares.stale = slices.DeleteFunc(c.shares.stale, func(s string) bool { return s == id })
		}
		delete(c.workers, id)
		i := sort.SearchStrings(c.ids, id)
		c.ids = append(c.ids[:i], c.ids[i+1:]...)
	}
	return events
}

// Turn is one request of a program asking to run.
type Turn struct {
	// RequestID names the turn: a cold turn's slot is freed by it
	// (EndCold).
	RequestID       string
	Key             Key
	ParentSessionID string
	PromptTokens    int64
	// Final: the client marked this the session's last request. The turn is
	// admitted as any other (a paused program's waits for its resume, a new
	// session's may be shed), asks the engine to retain nothing, and the
	// program is released when it ends (Finish, Cancel) with no other turn
	// of it in flight, as replay releases a session after its last turn; an
	// attempt another one follows (Supersede: a migration) releases nothing.
	Final bool
}

// Verdict is what a turn may do now.
type Verdict uint8

const (
	Run  Verdict = iota + 1 // route it now
	Wait                    // block on Admission.Waiter, then Admit again
	Shed                    // a new session turned away: retry after Admission.RetryAfter
)

func (v Verdict) String() string {
	switch v {
	case Run:
		return "run"
	case Wait:
		return "wait"
	case Shed:
		return "shed"
	}
	return "unknown"
}

// Admission is the answer to Admit.
type Admission struct {
	Verdict Verdict
	// Worker is where the program is placed ("" = not yet: the caller routes
	// among Room and reports the choice with Placed).
	Worker string
	// Room lists the workers with room for the program when it needs
	// placing; nil means any worker.
	Room []string
	// PriorityJump is added to the request's engine priority: +boost on the
	// first turn after a resume, the (negative) demotion jump while its
	// worker is soft-demoted.
	PriorityJump float64
	// Cold: the turn runs in Worker's cold lane, its program PAUSED
	// (ColdLane).
	Cold bool
	// Retain is how long the engine should keep what the turn caches ahead
	// of unretained blocks (ResidentRetention; 0 none).
	Retain time.Duration
	Waiter *Waiter
	// RetryAfter is when a shed session should try again.
	RetryAfter time.Duration
	Events     []Event
}

// Admit decides whether a turn may run. A caller woken from a Waiter passes
// it back in so that its place in the queue is released.
func (c *Controller) Admit(now time.Time, t Turn, w *Waiter) Admission {
	defer c.commit()
	since := now // when the turn started waiting
	if w != nil {
		c.q.remove(w)
		c.cameBack(w)
		since = w.since
		// A slot held for this turn is its own only in the paused case
		// below; whatever else happens to the turn gives it back.
		defer c.unclaim(w)
	}
	id := t.Key.id()
	p := c.get(id)
	var a Admission

	switch {
	case p == nil || p.Lifecycle == Terminated:
		if c.shedding() {
			a.Verdict, a.RetryAfter = Shed, c.cfg.ShedRetryAfter
			break
		}
		if p != nil {
			// A new program under a released session's key.
			c.drop(p)
		}
		c.seq++
		np := &Program{ID: id, Key: t.Key, ParentSessionID: t.ParentSessionID, Phase: Reasoning,
			TokenTotal: t.PromptTokens, Created: now, PhaseSince: now, LastActive: now, Seq: c.seq}
		room, anyWorker := c.room(t.PromptTokens)
		if c.counts[Paused][Reasoning]+c.counts[Paused][Acting] > 0 || (!anyWorker && len(room) == 0 && len(c.workers) > 0) {
			// New programs queue behind paused ones (fairness), or wait for
			// room; a tick resumes them.
			np.Lifecycle, np.PausedAt = Paused, now
			c.insert(np)
			a.Events = append(a.Events, c.event(now, np, ReasonQueued))
			if cw := c.coldSlot(np, since, w); cw != "" {
				ca := c.runCold(now, np, cw, t.RequestID)
				ca.Events = append(a.Events, ca.Events...)
				a = ca
				break
			}
			a.Verdict, a.Waiter = Wait, c.enqueue(since, np, t.Final)
			break
		}
		np.Lifecycle, np.InFlight = Active, 1
		c.insert(np)
		a.Verdict, a.Retain = Run, c.retention(np)
		if !anyWorker {
			a.Room = room
		}
		a.Events = append(a.Events, c.event(now, np, ReasonAdmitted))

	case p.Lifecycle == Paused:
		c.back(now, p)
		c.touch(p, now)
		if t.PromptTokens > p.TokenTotal {
			c.update(p, func(p *Program) { p.TokenTotal = t.PromptTokens })
		}
		if cw := c.coldSlot(p, since, w); cw != "" {
			a = c.runCold(now, p, cw, t.RequestID)
			break
		}
		a.Verdict, a.Waiter = Wait, c.enqueue(since, p, t.Final)

	case c.outgrows(p, t.PromptTokens):
		c.back(now, p)
		c.touch(p, now)
		c.update(p, func(p *Program) {
			p.TokenTotal = t.PromptTokens
			c.pause(p, now)
		})
		a.Events = append(a.Events, c.event(now, p, ReasonGrew))
		a.Verdict, a.Waiter = Wait, c.enqueue(since, p, t.Final)

	default: // Active
		c.back(now, p)
		wasActing := p.Phase != Reasoning
		c.update(p, func(p *Program) {
			if p.Phase != Reasoning {
				p.Phase, p.PhaseSince = Reasoning, now
			}
			p.LastActive = now
			p.InFlight++
			if t.PromptTokens > 0 {
				p.TokenTotal = t.PromptTokens
			}
		})
		if wasActing {
			a.Events = append(a.Events, c.event(now, p, ReasonReasoning))
		}
		if p.PendingBoost {
			a.PriorityJump += c.cfg.ResumePriorityBoost
			p.PendingBoost = false
		}
		if ws := c.workers[p.Worker]; ws != nil && now.Before(ws.demotedUntil) {
			a.PriorityJump += c.cfg.SoftDemotePriorityJump
		}
		a.Verdict, a.Worker, a.Retain = Run, p.Worker, c.retention(p)
		if p.Worker == "" {
			if room, anyWorker := c.room(p.TokenTotal); !anyWorker {
				a.Room = room
			}
		}
	}
	if t.Final && a.Verdict == Run {
		if p := c.get(id); p != nil && p.Lifecycle != Terminated {
			c.update(p, func(p *Program) { p.Ending = true })
		}
		a.Retain = 0 // nothing of the session is wanted after this turn
	}
	return a
}

// back records that a program's next turn arrived: its time away is one
// more sample of the gap model.
func (c *Controller) back(now time.Time, p *Program) {
	if p.AwaySince.IsZero() {
		return
	}
	c.gaps.Observe(p.ID, p.Tools, now.Sub(p.AwaySince))
	p.AwaySince = time.Time{}
}

// shedding reports that the paused programs hold more than ShedBacklog
// fleets' worth of working sets: a new session would only queue behind
// them. Under replicas both sides are the fleet's: every replica's paused
// programs (the others' as their demand was last heard, a buffer each
// included) against the workers' whole capacity, not this replica's share
// of it, so that a new session is shed alike whichever replica owns it.
func (c *Controller) shedding() bool {
	return c.cfg.ShedBacklog > 0 && c.fleetCapacity > 0 &&
		float64(c.pausedTokens)+c.peersPaused > c.cfg.ShedBacklog*float64(c.fleetCapacity)
}

// outgrows reports that a placed program's next turn, of prompt tokens,
// would take its worker past the pause threshold by growing: a new
// admission decision (ReadmitOnGrowth). The first turn after a resume is
// exempt — the resume placed it knowing its size — and so are a program
// alone on its worker, which pausing would not help, and one with a turn
// still generating, which a pause must not cut.
//
// Known weakness (docs/admission.md): the resume step counts idle programs
// decayed, so the next tick often resumes the program on the same worker
// and the pause only delays the turn.
func (c *Controller) outgrows(p *Program, prompt int64) bool {
	if !c.cfg.ReadmitOnGrowth || p.Worker == "" || p.PendingBoost || p.InFlight > 0 || prompt <= p.TokenTotal {
		return false
	}
	w := c.workers[p.Worker]
	if w == nil || w.cap.Tokens <= 0 || w.active <= 1 {
		return false
	}
	held := float64(p.TokenTotal)
	if p.Phase == Acting {
		held *= c.cfg.ActingTokenWeight
	}
	return w.used(&c.cfg)-held+float64(prompt) > float64(w.cap.Tokens)*c.cfg.PauseThreshold
}

// room lists the workers that can take a new program of tokens: capacity −
// used ≥ tokens + buffer and a free program slot. anyWorker reports that some
// worker's capacity is unknown, in which case every worker is eligible.
func (c *Controller) room(tokens int64) (room []string, anyWorker bool) {
	for _, id := range c.ids {
		w := c.workers[id]
		if w.cap.Tokens <= 0 && w.cap.MaxPrograms <= 0 {
			return nil, true
		}
		if t := w.cap.resumeTokens(); t > 0 && float64(t)-w.used(&c.cfg) < float64(tokens+c.cfg.BufferPerProgram) {
			continue
		}
		if w.cap.MaxPrograms > 0 && w.reasoning >= w.cap.MaxPrograms {
			continue
		}
		room = append(room, id)
	}
	return room, false
}

// enqueue queues a turn of p that has waited since since (the session's
// last, final).
func (c *Controller) enqueue(since time.Time, p *Program, final bool) *Waiter {
	g := 0
	if p.StepCount == 0 {
		g = 1
	}
	w := &Waiter{programID: p.ID, queue: p.LastWorker, group: g, seq: p.Seq, since: since, final: final, ch: make(chan struct{})}
	c.q.push(w)
	return w
}

// Abandon takes a waiting turn out of the queue (its deadline passed or its
// client went away: gone). A new program left with no turn waiting or
// running (a cold one) is released: nobody is waiting for it to start; so
// is one whose abandoned turn was the session's last (Turn.Final) when its
// client is gone, as a finish of that turn would have released it (a turn
// whose deadline passed is retried: the frontend answers "retry shortly").
func (c *Controller) Abandon(now time.Time, w *Waiter, gone bool) []Event {
	// A turn woken for a cold slot is out of the queue but still the
	// program's waiting turn; so is one the tick woke, resuming its
	// program, that had not come back yet.
	claimed := c.unclaim(w)
	woken := c.cameBack(w)
	if !c.q.remove(w) && !claimed && !woken {
		return nil
	}
	defer c.commit()
	p := c.get(w.programID)
	// The program the turn queued for (a session id taken up again since
	// is another program), with no other turn running or waiting, is
	// released when no turn of it ever ran (as a cancelled first turn's
	// is, endTurn): paused, or resumed for this turn alone. Left resumed,
	// reasoning with nothing in flight, it would hold its tokens on its
	// worker for good: the idle TTL releases only acting programs. So is
	// it when the turn was its last and its client left.
	if p != nil && p.Seq == w.seq && p.InFlight == 0 && !c.hasWaiting(p.ID) {
		neverRan := (p.Lifecycle == Paused || woken && p.Lifecycle == Active) && p.StepCount == 0
		lastGone := w.final && gone && p.Lifecycle != Terminated
		if neverRan || lastGone {
			return c.terminate(now, p, ReasonReleased)
		}
	}
	if p != nil && p.Lifecycle != Terminated {
		// Idle from now on, unless something else happens.
		c.touch(p, now)
	}
	return nil
}

// touch records activity: the idle clock of the program restarts.
func (c *Controller) touch(p *Program, now time.Time) {
	p.LastActive = now
	c.idle.push(p, now)
}

// Placed records where the caller routed a turn of the program. A pinned
// program that had to go elsewhere (its worker vanished) moves.
func (c *Controller) Placed(now time.Time, k Key, worker string) []Event {
	defer c.commit()
	p := c.get(k.id())
	if p == nil || p.Lifecycle != Active || p.Worker == worker {
		return nil
	}
	c.worker(worker)
	c.update(p, func(p *Program) { p.Worker, p.LastWorker, p.HeldSeen = worker, worker, false })
	return []Event{c.event(now, p, ReasonPlaced)}
}

// Holding is what the KV index says an idle program still holds on its
// worker: of its latest prompt (Blocks full blocks of BlockSize tokens),
// how many leading blocks each tier holds, device first, each further tier
// counting only the blocks past the ones above it (routing.Overlap's
// device, host and disk).
type Holding struct {
	Key    Key
	Worker string
	// Since is the program's PhaseSince when the question was asked: the
	// start of the tool call it is about. An answer that arrives after the
	// program's next turn ended (or was cancelled) describes another prompt.
	Since     time.Time
	Blocks    int
	BlockSize int
	Tiers     []int
	// Gone: the index knows none of the prompt. Taken as "holds nothing"
	// only after an answer about the same tool call knew it (the engines
	// dropped it from every tier since); before that it may mean the index
	// never had it (hashes that differ from the engine's, a full index),
	// and the answer is dropped.
	Gone bool
}

// Observe records a Holding (HeldFromIndex): an ACTING program still on
// that worker in that tool call counts, until its next turn or placement, as
// holding what the index found in the tiers admission counts — its whole
// working set when that is the whole prompt, since the engine keeps a
// turn's answer with its prompt. It reports whether the answer was taken.
func (c *Controller) Observe(h Holding) bool {
	defer c.commit()
	p := c.get(h.Key.id())
	if !c.cfg.HeldFromIndex || p == nil || p.Lifecycle != Active || p.Phase != Acting || p.Worker != h.Worker ||
		!p.PhaseSince.Equal(h.Since) || h.BlockSize <= 0 || h.Gone && !p.HeldSeen {
		return false
	}
	tiers := make([]int64, len(h.Tiers))
	for i, b := range h.Tiers {
		tiers[i] = int64(max(b, 0)) * int64(h.BlockSize)
	}
	held := c.cfg.CountedTokens(tiers...)
	if held >= int64(h.Blocks)*int64(h.BlockSize) {
		held = p.TokenTotal
	}
	if p.HeldSeen && p.Held == held {
		return true // unchanged: no re-accounting (which would re-add p to its worker's recent set)
	}
	c.update(p, func(p *Program) { p.Held, p.HeldSeen = held, true })
	return true
}

// Finish records the end of a turn's response stream: the program is ACTING
// (running a tool) with the real prompt + completion tokens as its working
// set. A program marked for pause is paused here, at its tool boundary.
//
// tools are the tools the turn called (what the program is now away
// running); the gap model learns how long each keeps a program away.
func (c *Controller) Finish(now time.Time, k Key, promptTokens, completionTokens int64, tools []string) []Event {
	return c.endTurn(now, k, func(p *Program) {
		if total := promptTokens + completionTokens; total > 0 {
			p.TokenTotal = total
		}
		p.StepCount++
		if p.InFlight == 0 {
			p.AwaySince, p.Tools = now, slices.Clone(tools)
		}
	}, turnFinished)
}

// Cancel ends a turn that produced nothing: it never reached an engine, or
// its worker failed before the first token (the frontend migrates it). The
// program's in-flight count drops as at Finish, but it took no step, its
// working set is unchanged and its time until the next turn is no tool gap.
// A session whose last turn was among those admitted is released when none
// is left in flight, as at Finish; so is a program that never completed a
// turn and has none left in flight or waiting (a first turn the engine
// refused, its prompt too long: it would otherwise hold that prompt's
// tokens against its worker until the idle TTL, and a retry is a new
// program).
func (c *Controller) Cancel(now time.Time, k Key) []Event {
	return c.endTurn(now, k, func(*Program) {}, turnCancelled)
}

// Supersede ends a turn as Cancel does, when another attempt of the same
// turn follows (the frontend moves it to another worker): that attempt is
// still to come, so a session ending with it is not released yet (if it
// never comes, the idle TTL releases it).
func (c *Controller) Supersede(now time.Time, k Key) []Event {
	return c.endTurn(now, k, func(*Program) {}, turnSuperseded)
}

// turnEnd is how a turn ended: Finish, Cancel or Supersede.
type turnEnd uint8

const (
	turnFinished turnEnd = iota
	turnCancelled
	turnSuperseded // another attempt of the turn follows
)

// endTurn is what Finish, Cancel and Supersede share: one turn fewer in
// flight, the program ACTING when none is left (and paused there when
// marked: a tool boundary), or released if the session's last turn was
// among them or, cancelled, if it never completed a turn and none waits;
// a superseded turn releases nothing (its next attempt is to come).
func (c *Controller) endTurn(now time.Time, k Key, turn func(*Program), how turnEnd) []Event {
	defer c.commit()
	p := c.get(k.id())
	if p == nil || p.Lifecycle == Terminated {
		return nil
	}
	var events []Event
	c.update(p, func(p *Program) {
		if p.InFlight > 0 {
			p.InFlight--
		}
		turn(p)
		if p.InFlight == 0 {
			p.Phase, p.PhaseSince = Acting, now
			p.HeldSeen = false // the index has not seen this turn's KV yet
		}
	})
	c.touch(p, now)
	if p.InFlight == 0 && how != turnSuperseded && (p.Ending || how == turnCancelled && p.StepCount == 0 && !c.hasWaiting(p.ID)) {
		return c.terminate(now, p, ReasonReleased) // the session's last turn ended, or its first never ran
	}
	if p.InFlight == 0 {
		events = append(events, c.event(now, p, ReasonActing))
		if p.MarkedForPause && p.Lifecycle == Active {
			c.update(p, func(p *Program) { c.pause(p, now) })
			events = append(events, c.event(now, p, ReasonPaused))
		}
	}
	return events
}

// Release terminates a program (session_final, or an operator).
func (c *Controller) Release(now time.Time, k Key) ([]Event, error) {
	defer c.commit()
	p := c.get(k.id())
	if p == nil {
		return nil, ErrUnknownProgram
	}
	if p.Lifecycle == Terminated {
		return nil, nil
	}
	return c.terminate(now, p, ReasonReleased), nil
}

// terminate releases a program and wakes its waiting turns (they re-admit
// as a new program).
func (c *Controller) terminate(now time.Time, p *Program, reason string) []Event {
	var pausedFor time.Duration
	if p.Lifecycle == Paused {
		pausedFor = now.Sub(p.PausedAt)
	}
	c.update(p, func(p *Program) {
		if p.Lifecycle == Paused {
			p.PausedTotal += now.Sub(p.PausedAt)
		}
		p.Lifecycle, p.Worker, p.MarkedForPause = Terminated, "", false
		p.PhaseSince = now
	})
	c.ended.push(p, now)
	c.wake(p.ID)
	c.gaps.Forget(p.ID)
	ev := c.event(now, p, reason)
	ev.PausedFor = pausedFor
	return []Event{ev}
}

func (c *Controller) pause(p *Program, now time.Time) {
	if p.Worker != "" {
		p.LastWorker = p.Worker
	}
	p.Lifecycle, p.Worker, p.MarkedForPause, p.PausedAt = Paused, "", false, now
	p.HeldSeen = false // a paused program counts whole, among the paused
}

func (c *Controller) resume(p *Program, now time.Time, worker string) {
	p.Lifecycle, p.Worker, p.LastWorker = Active, worker, worker
	p.PendingBoost = true
	p.PausedTotal += now.Sub(p.PausedAt)
	p.PausedAt, p.ResumedAt = time.Time{}, now
}

// wake closes the Ready channel of every waiting turn of a program, in queue
// order.
func (c *Controller) wake(id string) {
	for _, w := range c.q.take(id) {
		c.woke(w)
	}
}

// woke lets a turn taken out of the queue go, counting it as its program's
// until it comes back (cameBack).
func (c *Controller) woke(w *Waiter) {
	w.woken = true
	c.woken[w.programID]++
	close(w.ch)
}

// cameBack records that a woken turn came back (admitted again, or abandoned);
// it reports whether w had been woken.
func (c *Controller) cameBack(w *Waiter) bool {
	if !w.woken {
		return false
	}
	w.woken = false
	if c.woken[w.programID]--; c.woken[w.programID] <= 0 {
		delete(c.woken, w.programID)
	}
	return true
}

// hasWaiting reports whether a turn of program id waits in the queue or
// was woken and has not come back yet.
func (c *Controller) hasWaiting(id string) bool {
	return len(c.q.byProgram[id]) > 0 || c.woken[id] > 0
}

// reader returns the transaction reads go through: the call's write
// transaction when there is one, so that reads see its changes.
func (c *Controller) reader() *memdb.Txn {
	if c.wtxn != nil {
		return c.wtxn
	}
	return c.db.Txn(false)
}

func (c *Controller) writer() *memdb.Txn {
	if c.wtxn == nil {
		c.wtxn = c.db.Txn(true)
	}
	return c.wtxn
}

// commit ends the call's write transaction, if it opened one.
func (c *Controller) commit() {
	if c.wtxn != nil {
		c.wtxn.Commit()
		c.wtxn = nil
	}
}

func (c *Controller) get(id string) *Program {
	obj, err := c.reader().First(tablePrograms, indexID, id)
	if err != nil || obj == nil {
		return nil
	}
	return obj.(*row).p
}

func (c *Controller) index(p *Program) {
	// Insert only fails on schema errors, which tests would catch.
	_ = c.writer().Insert(tablePrograms, &row{ID: p.ID, Worker: p.Worker, Lifecycle: uint8(p.Lifecycle), p: p})
}

// insert adds a new program.
func (c *Controller) insert(p *Program) {
	c.account(p, +1)
	c.index(p)
}

// drop removes a program from the table.
func (c *Controller) drop(p *Program) {
	c.account(p, -1)
	_ = c.writer().Delete(tablePrograms, &row{ID: p.ID})
}

// update changes a program through f and keeps the per-worker sums, the
// state counts and the indexes in step. Every change goes through here.
func (c *Controller) update(p *Program, f func(*Program)) {
	c.account(p, -1)
	w, l := p.Worker, p.Lifecycle
	f(p)
	c.account(p, +1)
	if p.Worker != w || p.Lifecycle != l {
		c.index(p)
	}
}

func (c *Controller) account(p *Program, sign int) {
	c.counts[p.Lifecycle][p.Phase] += sign
	if p.Lifecycle == Paused {
		c.shares.demandGen++ // a paused program came, went or changed
		c.pausedTokens += int64(sign) * p.TokenTotal
		if sign > 0 {
			c.paused[p.ID] = p
		} else {
			delete(c.paused, p.ID)
		}
	}
	if p.Lifecycle != Active || p.Worker == "" {
		return
	}
	w := c.worker(p.Worker)
	c.shareChanged(p.Worker, w)
	w.active += sign
	if p.Phase == Reasoning {
		w.reasoning += sign
		w.reasoningTokens += int64(sign) * p.TokenTotal
		if p.MarkedForPause {
			w.marked += sign
		}
	} else {
		w.actingTokens += int64(sign) * p.held()
		if sign > 0 {
			w.recent[p] = p.PhaseSince
		} else {
			delete(w.recent, p)
		}
	}
}

func collect(it memdb.ResultIterator, err error) []*Program {
	if err != nil {
		return nil
	}
	var out []*Program
	for obj := it.Next(); obj != nil; obj = it.Next() {
		out = append(out, obj.(*row).p)
	}
	return out
}

// onWorker returns the ACTIVE programs placed on a worker, in id order.
func (c *Controller) onWorker(worker string) []*Program {
	return collect(c.reader().Get(tablePrograms, indexWorker, worker))
}

func (c *Controller) withLifecycle(l Lifecycle) []*Program {
	return collect(c.reader().Get(tablePrograms, indexLifecycle, uint8(l)))
}

// event snapshots a program for the event stream.
func (c *Controller) event(now time.Time, p *Program, reason string) Event {
	return Event{Time: now, Program: c.view(p), Reason: reason}
}

// view is the outside copy of a program, with derived fields filled in.
func (c *Controller) view(p *Program) Program {
	v := *p
	v.Waiting = len(c.q.byProgram[p.ID])
	if w := c.workers[p.Worker]; w != nil && p.Worker != "" {
		v.SoftDemotedUntil = w.demotedUntil
	}
	return v
}

// Get returns one program.
func (c *Controller) Get(k Key) (Program, bool) {
	p := c.get(k.id())
	if p == nil {
		return Program{}, false
	}
	return c.view(p), true
}

// Filter selects programs for List; zero fields match everything.
type Filter struct {
	Worker    string
	Lifecycle Lifecycle
	Tenant    string
}

// List returns the programs matching f, in (tenant, session) order.
func (c *Controller) List(f Filter) []Program {
	var ps []*Program
	switch {
	case f.Worker != "":
		ps = c.onWorker(f.Worker)
	case f.Lifecycle != 0:
		ps = c.withLifecycle(f.Lifecycle)
	default:
		ps = collect(c.reader().Get(tablePrograms, indexID))
	}
	var out []Program
	for _, p := range ps {
		if (f.Lifecycle != 0 && p.Lifecycle != f.Lifecycle) || (f.Tenant != "" && p.Key.Tenant != f.Tenant) {
			continue
		}
		out = append(out, c.view(p))
	}
	return out
}

// Counts returns the number of programs per lifecycle and phase.
func (c *Controller) Counts() map[Lifecycle]map[Phase]int {
	out := map[Lifecycle]map[Phase]int{}
	for _, l := range []Lifecycle{Active, Paused, Terminated} {
		out[l] = map[Phase]int{Reasoning: c.counts[l][Reasoning], Acting: c.counts[l][Acting]}
	}
	return out
}

// WorkerUtil is one worker's utilization, for metrics, logs and status.
type WorkerUtil struct {
	Worker           string
	Capacity         Capacity
	Used             float64 // pause-side tokens
	Utilization      float64 // Used / capacity (0 when unknown)
	CountUtilization float64 // REASONING / max programs
	Active           int
	Reasoning        int
	SoftDemoted      bool
}

// Utilization reports every worker, sorted by id.
func (c *Controller) Utilization(now time.Time) []WorkerUtil {
	out := make([]WorkerUtil, 0, len(c.ids))
	for _, id := range c.ids {
		w := c.workers[id]
		out = append(out, WorkerUtil{Worker: id, Capacity: w.cap, Used: w.used(&c.cfg), Utilization: w.util(&c.cfg),
			CountUtilization: w.countUtil(), Active: w.active, Reasoning: w.reasoning, SoftDemoted: now.Before(w.demotedUntil)})
	}
	return out
}

// decayed is the resume-side use of a worker: ACTING programs' tokens decay
// with time in the tool (2^(−t/τ)), since a long tool call makes its KV
// likely to be reclaimed anyway; with τ = 0 they count whole.
//
// Only programs that entered their tool call within recentHorizon τ count:
// older ones weigh less than 2^-64 of their tokens. So the sum costs the
// number of recent tool calls, not the number of programs.
func (c *Controller) decayed(now time.Time, worker string) float64 {
	w := c.workers[worker]
	if w == nil {
		return 0
	}
	used := float64(w.reasoningTokens) + float64(c.cfg.BufferPerProgram)*float64(w.active)
	if c.cfg.ActingDecayTau == 0 {
		return used + float64(w.actingTokens) // no decay: idle programs count whole
	}
	tau := c.cfg.ActingDecayTau.Seconds()
	for p, since := range w.recent {
		age := now.Sub(since).Seconds() / tau
		if age > recentHorizon {
			delete(w.recent, p)
			continue
		}
		used += float64(p.held()) * math.Exp2(-max(age, 0))
	}
	return used
}

// recentHorizon is how many τ an ACTING program's tokens are counted for.
const recentHorizon = 64
