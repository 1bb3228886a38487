package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/turns"
	"switchyard.dev/services/servicekit/servicetest"
)

// cacheWorld is what the workers hold in the pipeline test: the leading
// blocks of every prompt routed to a worker, answered as FindMatches
// overlaps. Each path of the test keeps its own, fed by its own decisions.
type cacheWorld struct {
	flashindexv1.UnimplementedFlashIndexerServiceServer
	mu   sync.Mutex
	held map[string]map[uint64]bool // worker → block hashes
}

func newCacheWorld() *cacheWorld { return &cacheWorld{held: map[string]map[uint64]bool{}} }

func (c *cacheWorld) place(worker string, blocks []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[worker] == nil {
		c.held[worker] = map[uint64]bool{}
	}
	for _, b := range blocks {
		c.held[worker][b] = true
	}
}

func (c *cacheWorld) overlap(worker string, blocks []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(blocks) && c.held[worker][blocks[n]] {
		n++
	}
	return n
}

// evict drops, on every worker, the blocks of a session's prompts from
// position from on (an engine evicting the tail of an idle session).
func (c *cacheWorld) evict(session string, from int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sid := scriptTurn{session: session}.sid()
	for _, held := range c.held {
		for b := range held {
			if b>>20 == sid && int(b&(1<<20-1)) >= from {
				delete(held, b)
			}
		}
	}
}

// resident is the worker's prefix of the chain that ends at tip (every
// prompt of a session extends the one before: its blocks are numbered
// from 0).
func (c *cacheWorld) resident(worker string, tip uint64) int {
	chain := make([]uint64, tip&(1<<20-1)+1)
	for i := range chain {
		chain[i] = tip>>20<<20 | uint64(i)
	}
	return c.overlap(worker, chain)
}

func (c *cacheWorld) FindResident(_ context.Context, req *flashindexv1.FindResidentRequest) (*flashindexv1.FindResidentResponse, error) {
	resp := &flashindexv1.FindResidentResponse{}
	for _, q := range req.GetQueries() {
		resp.Answers = append(resp.Answers, c.answer(q.GetWorkerId(), q.GetAnchors()))
	}
	return resp, nil
}

// answer is what an index of this world would say: the chain of the
// deepest anchor some worker holds (this index forgets a block no tier
// holds), and the worker's prefix of it.
func (c *cacheWorld) answer(worker string, anchors []uint64) *flashindexv1.ResidentAnswer {
	for i, tip := range anchors {
		c.mu.Lock()
		known := false
		for _, held := range c.held {
			known = known || held[tip]
		}
		c.mu.Unlock()
		if !known {
			continue
		}
		a := &flashindexv1.ResidentAnswer{ChainBlocks: uint32(tip&(1<<20-1) + 1), Anchor: uint32(i)}
		if n := c.resident(worker, tip); n > 0 {
			a.Overlap = &flashindexv1.WorkerOverlap{WorkerId: worker, DeviceBlocks: uint32(n)}
		}
		return a
	}
	return &flashindexv1.ResidentAnswer{}
}

func (c *cacheWorld) FindMatches(_ context.Context, req *flashindexv1.FindMatchesRequest) (*flashindexv1.FindMatchesResponse, error) {
	blocks := req.GetHashes().GetBlockHashes()
	resp := &flashindexv1.FindMatchesResponse{QueryBlocks: uint32(len(blocks))}
	for _, w := range pipelineWorkers {
		if n := c.overlap(w, blocks); n > 0 {
			resp.Overlaps = append(resp.Overlaps, &flashindexv1.WorkerOverlap{WorkerId: w, DeviceBlocks: uint32(n)})
		}
	}
	return resp, nil
}

var pipelineWorkers = []string{"w0", "w1", "w2"}

const (
	pipelineCap   = 4000 // KV tokens per worker: the script's sessions overflow the fleet
	pipelineBlock = 16
)

// scriptTurn is one turn of the script: a session's prompt (its blocks
// extend the previous turn's) and its sub-agent parent.
type scriptTurn struct {
	id, session, parent string
	prompt              int
}

func (st scriptTurn) sid() uint64 {
	var sid uint64
	for _, ch := range st.session {
		sid = sid*131 + uint64(ch)
	}
	return sid
}

func (st scriptTurn) blocks() []uint64 {
	sid := st.sid()
	out := make([]uint64, st.prompt/pipelineBlock)
	for i := range out {
		out[i] = sid<<20 | uint64(i)
	}
	return out
}

// decision is what the test compares: where a turn went, why, and how the
// engine is told to prioritise it.
type decision struct {
	Worker   string
	Priority int32
	Retain   time.Duration
}

// pipelinePath is one way of running the script: through the service or
// through the bare pipeline.
type pipelinePath interface {
	// route starts a turn; the decision comes back on done (at once, or
	// when admission lets it run).
	route(st scriptTurn, done chan<- routed)
	finish(st scriptTurn, worker string, prompt, completion int)
	tick()
	programs() []admission.Program
}

type routed struct {
	id string
	d  decision
}

// TestPipelineLiveAndReplayDecideAlike drives one script of multi-turn
// sessions (sub-agents, growth past the fleet's KV, pauses, resumes and
// forced resumes) through the scheduler service over gRPC and through a
// bare turns.Pipeline fed the candidates replay builds (every worker, its
// capacity and its overlap): every turn must land on the same worker for
// the same reason with the same engine priority, the same turns must wait
// and be woken by the same step, and the program tables must end equal.
//
// It runs three times: with the wait bound and re-admission on growth and
// with the cold lane, resident retention and rotation, both counting idle
// programs whole (--held-from-index=false), and with Switchyard's default of
// counting them by what the index says they hold while the engines evict
// two sessions' tails before each tick.
func TestPipelineLiveAndReplayDecideAlike(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*admission.Config)
		cold bool
	}{
		{"held-from-index", func(a *admission.Config) {}, true},
		{"wait-bound,readmit,whole", func(a *admission.Config) {
			a.HeldFromIndex = false
			a.ColdLane, a.ResidentRetention, a.RotateAfter = 0, 0, 0
			a.MaxWait = 20 * time.Second
			a.ResumeOrder = admission.ResumeOldest
			a.ReadmitOnGrowth = true
		}, false},
		{"cold-lane,retention,rotate,whole", func(a *admission.Config) {
			a.HeldFromIndex = false
			a.ColdLane, a.ResidentRetention, a.RotateAfter = 1, 5*time.Minute, 15*time.Second
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testPipelineDecidesAlike(t, func(c *Config) {
				c.Policy = string(routing.PolicySessionAware)
				c.Admission = admission.DefaultConfig()
				c.Admission.ActingTokenWeight = 1    // count idle sessions whole: the script pauses
				c.Admission.TickInterval = time.Hour // the test ticks by hand
				tc.mod(&c.Admission)
			}, tc.cold)
		})
	}
}

func testPipelineDecidesAlike(t *testing.T, mod func(*Config), cold bool) {
	live := newLivePath(t, mod)
	core := newCorePath(t, mod, live.clock)

	var sessions []string
	for i := range 6 {
		sessions = append(sessions, fmt.Sprintf("s%d", i))
	}
	turnOf := func(round int, sess string) scriptTurn {
		st := scriptTurn{id: fmt.Sprintf("%s#%d", sess, round), session: sess, prompt: 640 * (round + 1)}
		if sess == "s5" {
			st.parent = "s0" // a sub-agent
		}
		return st
	}
	paths := []pipelinePath{live, core}
	results := []chan routed{make(chan routed, 64), make(chan routed, 64)}
	got := []map[string]decision{{}, {}}
	// A session sends its next turn only once the previous one finished.
	pending := map[string]scriptTurn{} // by session
	// collect waits for exactly the turns the core path finished so far
	// (it decides synchronously) to finish on the live path too.
	collect := func(step string) {
		t.Helper()
		for {
			select {
			case r := <-results[1]:
				got[1][r.id] = r.d
				continue
			default:
			}
			break
		}
		deadline := time.After(10 * time.Second)
		for len(got[0]) < len(got[1]) {
			select {
			case r := <-results[0]:
				got[0][r.id] = r.d
			case <-deadline:
				t.Fatalf("%s: the live path decided %d turns, the core path %d", step, len(got[0]), len(got[1]))
			}
		}
		// And no more: each turn the core path holds back settles on the live
		// path too (waiting for admission, or placed), and must be waiting.
		for _, st := range pending {
			if _, decided := got[1][st.id]; decided {
				continue
			}
			key := admission.Key{Tenant: "t", SessionID: st.session}
			servicetest.Eventually(t, step+": "+st.id+" settles on the live path", func() bool {
				return live.h.waiting(key) > 0 || live.routedNow(st.id)
			})
			if live.routedNow(st.id) {
				t.Fatalf("%s: the live path decided %s, which the core path still holds back", step, st.id)
			}
		}
		select {
		case r := <-results[0]:
			t.Fatalf("%s: the live path decided %s, which the core path still holds back", step, r.id)
		default:
		}
	}

	next := map[string]int{}
	for range 5 {
		for _, sess := range sessions {
			if _, busy := pending[sess]; busy {
				continue
			}
			st := turnOf(next[sess], sess)
			next[sess]++
			pending[sess] = st
			for i, p := range paths {
				p.route(st, results[i])
			}
			collect("route " + st.id)
		}
		live.clock.Advance(2 * time.Second)
		for _, sess := range sessions {
			st, ok := pending[sess]
			d, decided := got[1][st.id]
			if !ok || !decided {
				continue // still waiting for admission
			}
			delete(pending, sess)
			for _, p := range paths {
				p.finish(st, d.Worker, st.prompt, 64)
			}
			collect("finish " + st.id)
		}
		live.clock.Advance(8 * time.Second)
		for _, w := range []*cacheWorld{live.world, core.world} {
			w.evict("s1", 4)
			w.evict("s3", 10)
		}
		for _, p := range paths {
			p.tick()
		}
		collect("tick")
	}
	// Drain: ticks and finishes until every turn ran.
	for step := 0; len(pending) > 0; step++ {
		if step > 50 {
			t.Fatalf("turns never admitted: %v", pending)
		}
		live.clock.Advance(15 * time.Second)
		for _, p := range paths {
			p.tick()
		}
		collect(fmt.Sprintf("drain tick %d", step))
		for _, sess := range sessions {
			st, ok := pending[sess]
			if d, decided := got[1][st.id]; ok && decided {
				delete(pending, sess)
				for _, p := range paths {
					p.finish(st, d.Worker, st.prompt, 64)
				}
				collect("finish " + st.id)
			}
		}
	}
	if diff := cmp.Diff(got[1], got[0]); diff != "" {
		t.Fatalf("decisions differ (-core +live):\n%s", diff)
	}
	if diff := cmp.Diff(core.programs(), live.programs()); diff != "" {
		t.Fatalf("program tables differ (-core +live):\n%s", diff)
	}
	var waited, moved int
	for _, p := range core.programs() {
		if p.PausedTotal > 0 || p.Lifecycle == admission.Paused {
			waited++
		}
	}
	moved = core.pinned
	prio, coldTurns, retained := 0, 0, 0
	for _, d := range got[1] {
		if d.Priority != 0 {
			prio++
		}
		if d.Priority > 0 {
			coldTurns++ // behind the normal level: cold (or soft-demoted)
		}
		if d.Retain > 0 {
			retained++
		}
	}
	t.Logf("%d turns: %d placed where admission pinned them, %d with an engine priority (%d behind the normal level: cold or soft-demoted), %d retained; %d programs paused",
		len(got[1]), moved, prio, coldTurns, retained, waited)
	if waited == 0 || moved == 0 || prio == 0 {
		t.Fatal("the script must exercise pauses, pinned placements and engine priorities")
	}
	if cold && (coldTurns == 0 || retained == 0) {
		t.Fatal("the script must exercise cold turns and retained ones")
	}
	if core.pipe.Controller().Config().HeldFromIndex && core.heldLess == 0 {
		t.Fatal("the script must have idle programs hold less than their working sets")
	}
}

// livePath runs the script through the service over gRPC.
type livePath struct {
	t     *testing.T
	h     *harness
	clock *clock
	world *cacheWorld
}

func newLivePath(t *testing.T, mod func(*Config)) *livePath {
	world := newCacheWorld()
	h := newHarnessIndex(t, mod, world)
	for _, w := range pipelineWorkers {
		h.register(t, worker(w, pipelineCap))
	}
	return &livePath{t: t, h: h, clock: h.clock, world: world}
}

func agentOf(st scriptTurn) *agentv1.AgentContext {
	return &agentv1.AgentContext{SessionId: st.session, ParentSessionId: st.parent, Tenant: "t"}
}

func (l *livePath) route(st scriptTurn, done chan<- routed) {
	key := admission.Key{Tenant: "t", SessionID: st.session}
	before := l.h.waiting(key)
	go func() {
		resp, err := l.h.client.Route(context.Background(), &schedulerv1.RouteRequest{RequestId: st.id, Agent: agentOf(st),
			BlockSize: pipelineBlock, BlockHashes: st.blocks(), PromptTokens: uint32(st.prompt)})
		if err != nil {
			l.t.Errorf("route %s: %v", st.id, err)
			return
		}
		l.world.place(resp.GetWorkerId(), st.blocks())
		done <- routed{st.id, decision{Worker: resp.GetWorkerId(), Priority: resp.GetPriority(),
			Retain: time.Duration(resp.GetRetentionSeconds()) * time.Second}}
	}()
	// Until the call has either been decided or is waiting for admission,
	// the next step of the script must not run.
	servicetest.Poll(servicetest.Patience, func() bool { return l.h.waiting(key) != before || l.routedNow(st.id) })
}

// routedNow reports whether the router tracks the request (it was placed).
func (l *livePath) routedNow(id string) bool {
	l.h.svc.mu.Lock()
	defer l.h.svc.mu.Unlock()
	_, ok := l.h.svc.pipe.Router().Load().RequestWorker(id)
	return ok
}

func (l *livePath) finish(st scriptTurn, worker string, prompt, completion int) {
	if _, err := l.h.client.FinishRequest(context.Background(), &schedulerv1.FinishRequestRequest{RequestId: st.id, WorkerId: worker,
		Agent: agentOf(st), Usage: &enginev1.Usage{PromptTokens: uint32(prompt), CompletionTokens: uint32(completion)},
		ToolCallNames: []string{"Bash"}}); err != nil {
		l.t.Fatal(err)
	}
}

func (l *livePath) tick() { l.h.svc.tick(context.Background()) }

func (l *livePath) programs() []admission.Program {
	l.h.svc.mu.Lock()
	defer l.h.svc.mu.Unlock()
	return l.h.svc.ctrl.List(admission.Filter{})
}

// corePath runs the script through a bare pipeline, as replay drives it:
// the candidates are every worker with its capacity and overlap, waiting
// turns are re-admitted when their waiter fires.
type corePath struct {
	t       *testing.T
	pipe    *turns.Pipeline
	clock   *clock
	world   *cacheWorld
	waiting []coreWait
	pinned  int // turns placed where admission pinned them
	// heldLess counts the answers before ticks that found an idle program
	// holding less than its working set.
	heldLess int
}

type coreWait struct {
	st   scriptTurn
	w    *admission.Waiter
	done chan<- routed
}

func newCorePath(t *testing.T, mod func(*Config), clk *clock) *corePath {
	cfg := DefaultConfig()
	cfg.Seed = 1
	mod(&cfg)
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := turns.New(pipelineConfig(cfg, cfg.Seed, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range pipelineWorkers {
		pipe.SetWorker(w, []int64{pipelineCap}, 64)
	}
	return &corePath{t: t, pipe: pipe, clock: clk, world: newCacheWorld()}
}

func (c *corePath) turn(st scriptTurn) turns.Turn {
	bs := st.blocks()
	return turns.Turn{RequestID: st.id, Key: admission.Key{Tenant: "t", SessionID: st.session}, ParentSessionID: st.parent,
		PromptTokens: st.prompt, Blocks: len(bs), BlockSize: pipelineBlock, Anchors: turns.Anchors(bs)}
}

func (c *corePath) route(st scriptTurn, done chan<- routed) { c.admit(st, nil, done) }

func (c *corePath) admit(st scriptTurn, w *admission.Waiter, done chan<- routed) {
	a := c.pipe.Admit(c.clock.Now(), c.turn(st), w)
	if a.Verdict == admission.Wait {
		c.waiting = append(c.waiting, coreWait{st, a.Waiter, done})
		return
	}
	var cands []routing.Candidate
	for _, w := range pipelineWorkers {
		cands = append(cands, routing.Candidate{Worker: w, Reported: routing.Load{CapacityTokens: pipelineCap, MaxRunning: 64},
			Overlap: routing.Overlap{Device: c.world.overlap(w, st.blocks())}})
	}
	pl, err := c.pipe.Place(c.clock.Now(), c.turn(st), a, cands)
	if err != nil {
		c.t.Fatal(err)
	}
	c.world.place(pl.Worker, st.blocks())
	if pl.Reason == routing.ReasonPinned {
		c.pinned++ // the live response carries no reason: counted here only
	}
	done <- routed{st.id, decision{Worker: pl.Worker, Priority: pl.Priority, Retain: pl.Retain}}
}

// wake re-admits the waiting turns whose waiter fired, in the order they
// started waiting.
func (c *corePath) wake() {
	keep := c.waiting[:0]
	var ready []coreWait
	for _, w := range c.waiting {
		select {
		case <-w.w.Ready():
			ready = append(ready, w)
		default:
			keep = append(keep, w)
		}
	}
	c.waiting = keep
	for _, w := range ready {
		c.admit(w.st, w.w, w.done)
	}
}

func (c *corePath) finish(st scriptTurn, _ string, prompt, completion int) {
	c.pipe.Finish(c.clock.Now(), st.id, turns.Ended{PromptTokens: prompt, CompletionTokens: completion, Tools: []string{"Bash"}})
	c.wake()
}

func (c *corePath) tick() {
	for _, q := range c.pipe.Holdings() {
		anchors := make([]uint64, len(q.Anchors))
		for i, a := range q.Anchors {
			anchors[i] = uint64(a.Hash)
		}
		a := c.world.answer(q.Worker, anchors)
		c.pipe.Held(q, turns.HoldingAnswer{Anchor: int(a.GetAnchor()), ChainBlocks: int(a.GetChainBlocks()),
			Overlap: routing.Overlap{Device: int(a.GetOverlap().GetDeviceBlocks())}})
		if p, _ := c.pipe.Controller().Get(q.Key); p.HeldSeen && p.Held < p.TokenTotal {
			c.heldLess++
		}
	}
	c.pipe.Tick(c.clock.Now())
	c.wake()
}

func (c *corePath) programs() []admission.Program {
	return c.pipe.Controller().List(admission.Filter{})
}
