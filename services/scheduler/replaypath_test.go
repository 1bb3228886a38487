package scheduler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/replay"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/trace"
	"switchyard.dev/pkg/turns"
	"switchyard.dev/services/servicekit/servicetest"
)

// TestReplayAndLiveServiceDecideAlike runs small replays (simulated engines
// whose KV the sessions outgrow, a sub-agent; several policies and fleets)
// recording every call replay's shell makes into its scheduling pipeline,
// then drives the scheduler service over gRPC through the same sequence in
// the same world: the flash indexer answers each lookup with the overlaps
// replay's index gave and has the workers report the loads replay's engines
// had, and before each tick says what replay's index said idle programs
// hold; the clock reads replay's. Every turn must go to the same worker
// with the same engine priority and retention, the same turns must wait,
// and the same step (a finish, a tick) must let them run and no other.
func TestReplayAndLiveServiceDecideAlike(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy replay.Policy
		// turns is each session's length (0: 100); conc the sessions at
		// once (0: 16); hostKV each worker's
		// host tier in multiples of its GPU KV; workers, when set, replaces
		// the three (twelve: the registry lists w10 before w2, and ties
		// break in its order).
		turns, conc, hostKV, workers int
		// replicas: scheduler replicas, each told the others' use as it
		// decides (replay's --sync-delay 0).
		replicas int
		want     replayWant
	}{
		{name: "session_aware", policy: replay.PolicySessionAware, want: replayWant{placed: 500, cost: 1, woken: 20, final: 1}},
		// Short sessions: many new programs, placed by the cost among the
		// workers admission says have room.
		{name: "session_aware,short", policy: replay.PolicySessionAware, turns: 12, conc: 32, want: replayWant{placed: 500, cost: 10, woken: 20, final: 20}},
		// ThunderAgent's pauses leave many turns waiting.
		{name: "thunderagent", policy: replay.PolicyThunderAgent, want: replayWant{placed: 150, cost: 1, woken: 20}},
		{name: "kv", policy: replay.PolicyKV, want: replayWant{placed: 500, cost: 500, final: 1}},
		{name: "session_aware,host=4x", policy: replay.PolicySessionAware, hostKV: 4, want: replayWant{placed: 500, cost: 1, final: 1}},
		{name: "kv,workers=12", policy: replay.PolicyKV, workers: 12, want: replayWant{placed: 500, cost: 500, final: 1}},
		// Three replicas, each owning a share of the sessions and deciding
		// with the others' use of every worker.
		{name: "session_aware,replicas=3", policy: replay.PolicySessionAware, conc: 24, replicas: 3, want: replayWant{placed: 500, cost: 1, woken: 20, final: 1}},
		// Three replicas routing by the cost alone, each breaking ties with
		// its own stream.
		{name: "kv,replicas=3", policy: replay.PolicyKV, conc: 24, replicas: 3, want: replayWant{placed: 500, cost: 500, final: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := replayPathConfig(tc.policy)
			rc.Engine.HostBlocks = tc.hostKV * rc.Engine.NumGPUBlocks
			if tc.workers > 0 {
				rc.Workers = tc.workers
			}
			if tc.conc > 0 {
				rc.Concurrency = tc.conc
			}
			if tc.replicas > 0 {
				rc.SchedulerReplicas = tc.replicas
			}
			n := tc.turns
			if n == 0 {
				n = 100
			}
			calls := recordReplay(t, rc, replayPathWorkload(n))
			live := newReplayLive(t, rc, calls)
			live.play(t, calls, tc.want, tc.hostKV > 0)
		})
	}
}

// replayWant is what a run must exercise: turns placed, of them by the
// routing cost, turns woken from an admission wait, final turns.
type replayWant struct{ placed, cost, woken, final int }

// replayPathWorkload is eight growing sessions of n turns (two blocks of
// 64 tokens more each turn, tool gaps of 1–9 s), the first spawning a
// sub-agent of n turns at its third.
func replayPathWorkload(n int) *trace.Workload {
	w := &trace.Workload{Name: "pipeline", BlockSize: 64}
	grow := func(id string, ns uint64, n int) *trace.Session {
		s := &trace.Session{ID: id, Parent: -1}
		var blocks []uint64
		for i := range n {
			for len(blocks) < 4+2*i {
				blocks = append(blocks, ns<<32|uint64(len(blocks)+1))
			}
			s.Turns = append(s.Turns, trace.Turn{Blocks: slices.Clone(blocks), InputLen: len(blocks)*64 + 10, OutputLen: 40,
				Gap: time.Duration(1+(i*7+int(ns))%9) * time.Second, ToolCall: true})
		}
		s.Turns[0].Gap = 0
		return s
	}
	for i := range 8 {
		w.Sessions = append(w.Sessions, grow(fmt.Sprintf("s%d", i), uint64(i+1), n))
	}
	child := grow("s0/agent", 100, n)
	child.Parent = 0
	w.Sessions = append(w.Sessions, child)
	w.Sessions[0].Turns[2].Children = []int{len(w.Sessions) - 1}
	return w
}

// replayPathConfig is the run: sixteen sessions at once on three engines
// of 6 k tokens of KV each (session_aware with Switchyard's admission
// defaults). Each session's last turn is marked final, as a live client
// ends a session (replay's default, telling the pipeline when the session's
// walk ends, has no live counterpart).
func replayPathConfig(p replay.Policy) replay.Config {
	c := replay.DefaultConfig()
	c.Workers, c.Concurrency, c.Policy = 3, 16, p
	c.SessionEnd = replay.SessionEndFinal
	c.Engine.BlockSize = 16
	c.Engine.NumGPUBlocks = 384
	c.Warmup, c.Window = 0, 4*time.Minute
	return c
}

func recordReplay(t *testing.T, c replay.Config, w *trace.Workload) []replay.Call {
	t.Helper()
	var calls []replay.Call
	c.Calls = func(call replay.Call) { calls = append(calls, call) }
	if _, err := replay.Run(w, c); err != nil {
		t.Fatal(err)
	}
	return calls
}

// replayLive is the scheduler service with a world that says what replay's
// said.
type replayLive struct {
	// hs are the scheduler replicas, by replay's number.
	hs    []*harness
	world *replayWorld
	// pending are the live Route calls waiting for admission, by request.
	pending map[string]chan routeAnswer
	agents  map[string]*agentv1.AgentContext // by request id
	workers map[string]string                // where each placed turn went
}

type routeAnswer struct {
	resp *schedulerv1.RouteResponse
	err  error
}

func newReplayLive(t *testing.T, rc replay.Config, calls []replay.Call) *replayLive {
	world := &replayWorld{overlaps: map[string][]*flashindexv1.WorkerOverlap{}, loads: map[string][]routing.Candidate{},
		resident: map[string]*flashindexv1.ResidentAnswer{}, done: map[string]bool{}}
	world.cond = sync.NewCond(&world.mu)
	for i := range max(rc.SchedulerReplicas, 1) {
		world.hs = append(world.hs, newReplayReplica(t, rc, world, i))
	}
	if len(world.hs) > 1 {
		for i, h := range world.hs {
			h.svc.peers = replayPeers(i, len(world.hs))
		}
	}
	// The workers as replay's engines describe themselves.
	var first *replay.Call
	for i := range calls {
		if calls[i].Op == replay.CallPlace {
			first = &calls[i]
			break
		}
	}
	if first == nil {
		t.Fatal("replay placed no turn")
	}
	for _, h := range world.hs {
		for _, c := range first.Candidates {
			l := c.Reported
			h.register(t, &workerv1.Worker{WorkerId: c.Worker, Address: "shim-" + c.Worker + ":9500", Engine: "sim", BlockSize: uint32(rc.Engine.BlockSize), Epoch: 1,
				Capacity: &workerv1.WorkerCapacity{GpuBlocks: uint32(rc.Engine.NumGPUBlocks), HostBlocks: uint32(rc.Engine.HostBlocks), KvCapacityTokens: uint64(l.CapacityTokens),
					MaxRunningRequests: uint32(l.MaxRunning)}})
		}
	}
	return &replayLive{hs: world.hs, world: world, pending: map[string]chan routeAnswer{}, agents: map[string]*agentv1.AgentContext{},
		workers: map[string]string{}}
}

// newReplayReplica is scheduler replica i of the run, configured as
// replay's, with its tie-breaks.
func newReplayReplica(t *testing.T, rc replay.Config, world *replayWorld, i int) *harness {
	return newHarnessIndex(t, func(c *Config) {
		c.Seed = uint64(rc.Seed)
		c.Policy = string(rc.Policy.Routing())
		c.Routing = routing.DefaultConfig()
		c.Routing.Policy = rc.Policy.Routing()
		c.Routing.BlockSize = rc.Engine.BlockSize
		c.Routing.StaleRequestAfter = 0 // as replay: a simulated engine never loses a finish
		c.HeartbeatTransit = 0          // its heartbeats are replay's exact reads
		switch rc.Policy {
		case replay.PolicySessionAware:
			c.Admission = admission.DefaultConfig()
		case replay.PolicyThunderAgent:
			c.Admission = admission.ThunderAgentConfig()
		}
		// Admission's tick interval stays replay's, as admission reads it
		// (a soft demotion lasts 1.5 intervals); the test ticks when replay
		// did (the service's own tick loop runs only under Run).
		c.LeaseTTL = 1000 * time.Hour
		c.PredictOnRouteTTL = 0
		c.FindMatchesTimeout = time.Minute // the fake index may hold a woken turn's lookup (inOrder)
	}, world, withTieBreakStream(i))
}

// replayPeers is replica i's view of the others, which tell (told) it their
// use of every worker: stale never, caught up.
func replayPeers(i, n int) *peers {
	p := &peers{self: fmt.Sprint("r", i), every: time.Hour, stale: 1000 * time.Hour}
	for q := range n {
		if q != i {
			p.list = append(p.list, &peer{addr: fmt.Sprint("r", q), id: fmt.Sprint("r", q), uses: map[string]admission.Use{}})
		}
	}
	p.caughtUp.Store(true)
	return p
}

// heard is what replica i was last told the others use, by worker.
func (l *replayLive) heard(i int) map[string]admission.Use {
	sum := map[string]admission.Use{}
	for _, q := range l.hs[i].svc.peers.list {
		q.mu.Lock()
		for w, u := range q.uses {
			sum[w] = sum[w].Add(u)
		}
		q.mu.Unlock()
	}
	return sum
}

// tell gives replica i every other replica's use of every worker as it is
// now, as replay does before a replica decides (with no sync delay): what
// each would send on the use exchange, heard as replica i hears a peer.
func (l *replayLive) tell(i int) {
	if len(l.hs) == 1 {
		return
	}
	s := l.hs[i].svc
	for _, q := range s.peers.list {
		var other int
		fmt.Sscanf(q.addr, "r%d", &other)
		o := l.hs[other].svc
		s.heard(q, o.useToProto(o.admissionUse()))
	}
}

// play drives the service through calls, checking each answer.
func (l *replayLive) play(t *testing.T, calls []replay.Call, want replayWant, hostTier bool) {
	t.Helper()
	var placed, waited, woken, rewaited, wokenFree, together, ticks, held, heldNow, prio, retained, child, final, lower int
	reasons := map[routing.Reason]int{}
	note := func(p replay.Call) {
		placed++
		reasons[p.Placement.Reason]++
		if p.Placement.Priority != 0 {
			prio++
		}
		if p.Placement.Retain > 0 {
			retained++
		}
		if p.Turn.ParentSessionID != "" {
			child++
		}
		if p.Turn.Final {
			final++
		}
		if slices.ContainsFunc(p.Candidates, func(c routing.Candidate) bool { return c.Overlap.HostExt > 0 }) {
			lower++
		}
	}
	for i := 0; i < len(calls); i++ {
		c := calls[i]
		if c.Replica >= len(l.hs) {
			t.Fatalf("call %d on replica %d of %d", i, c.Replica, len(l.hs))
		}
		h := l.hs[c.Replica]
		for _, h := range l.hs {
			h.clock.set(c.At)
		}
		step := fmt.Sprintf("call %d (%s %s%s at %v on replica %d)", i, c.Op, c.Turn.RequestID, c.RequestID, c.At.Sub(calls[0].At), c.Replica)
		if c.Op == replay.CallAdmit && !c.Woken || c.Op == replay.CallFinish || c.Op == replay.CallTick {
			l.tell(c.Replica) // what the others use, as replay's replica hears it as it decides
		}
		if c.Others != nil {
			if got := l.heard(c.Replica); !maps.Equal(got, c.Others) {
				t.Fatalf("%s: the other replicas' use, live %v, replay %v", step, got, c.Others)
			}
		}
		switch c.Op {
		case replay.CallAdmit:
			if c.Woken {
				woken++
				switch c.Admission.Verdict {
				case admission.Run:
					// Its Place follows: the live call is already under way.
				case admission.Wait:
					// Woken and told to wait again: the live call waits on
					// (settled checks that it did not answer).
					rewaited++
				default:
					t.Fatalf("%s: woken and told %v", step, c.Admission.Verdict)
				}
				continue
			}
			switch c.Admission.Verdict {
			case admission.Run:
				p := calls[i+1]
				if p.Op != replay.CallPlace || p.Turn.RequestID != c.Turn.RequestID {
					t.Fatalf("%s: admitted, then %s", step, p.Op)
				}
				i++
				l.world.know(p)
				select {
				case ans := <-l.route(t, h, c.Turn, toUint64s(p.Hashes)):
					l.check(t, step, p, ans)
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: replay ran the turn at once; the live call still waits", step)
				}
				note(p)
			case admission.Wait:
				hashes := l.hashesOf(calls[i:], c.Turn.RequestID)
				before := h.waiting(c.Turn.Key)
				l.pending[c.Turn.RequestID] = l.route(t, h, c.Turn, hashes)
				servicetest.Eventually(t, step+" waits", func() bool { return h.waiting(c.Turn.Key) > before })
				waited++
			default:
				t.Fatalf("%s: verdict %v", step, c.Admission.Verdict)
			}
		case replay.CallPlace: // of a woken turn
			if c.Placement.Reason != routing.ReasonPinned {
				wokenFree++
			}
			ans, ok := l.pending[c.Turn.RequestID]
			if !ok {
				t.Fatalf("%s: placed without an admission", step)
			}
			delete(l.pending, c.Turn.RequestID)
			select {
			case a := <-ans:
				l.check(t, step, c, a)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: replay placed the woken turn; the live call still waits", step)
			}
			note(c)
		case replay.CallPrefillDone:
			if _, err := h.client.MarkPrefillComplete(context.Background(), &schedulerv1.MarkPrefillCompleteRequest{RequestId: c.RequestID}); err != nil {
				t.Fatal(err)
			}
		case replay.CallFinish:
			if l.showWoken(calls[i+1:]) > 1 {
				together++
			}
			if _, err := h.client.FinishRequest(context.Background(), &schedulerv1.FinishRequestRequest{RequestId: c.RequestID, WorkerId: l.workers[c.RequestID],
				Agent: l.agents[c.RequestID], Usage: &enginev1.Usage{PromptTokens: uint32(c.Ended.PromptTokens), CompletionTokens: uint32(c.Ended.CompletionTokens)}}); err != nil {
				t.Fatal(err)
			}
			l.settled(t, step, calls[i+1:])
		case replay.CallHeld:
			l.world.holds(c)
			held++
			heldNow++
		case replay.CallTick:
			// The holdings were answered before the tick (the Held calls
			// before this one); the service asks them again in its tick
			// and must ask exactly those.
			if l.showWoken(calls[i+1:]) > 1 {
				together++
			}
			h.svc.tick(context.Background())
			if asked, missing := l.world.askedSince(); asked != heldNow || len(missing) > 0 {
				t.Fatalf("%s: live asked what %d idle programs hold (none answered by replay: %v), replay %d", step, asked, missing, heldNow)
			}
			heldNow = 0
			l.settled(t, step, calls[i+1:])
			ticks++
		case replay.CallEndSession:
			t.Fatalf("%s: the run marks last turns final; live has no EndSession", step)
		}
	}
	if len(l.pending) != len(stillWaiting(calls)) {
		t.Fatalf("%d live routes still wait, replay left %d turns waiting", len(l.pending), len(stillWaiting(calls)))
	}
	l.stillBlocked(t, "the end")
	for _, h := range l.hs {
		if n := testutil.ToFloat64(h.svc.metrics.findMatchesFails); n != 0 {
			t.Fatalf("%v lookups failed: those turns were routed without replay's overlaps", n)
		}
	}
	t.Logf("%d calls on %d replicas: %d turns placed alike (%d of a sub-agent, %d final, %d with a prefix in a host tier; by reason %v; %d with an engine priority, %d retained), %d waited (%d woken, %d of them told to wait again, %d not pinned by admission; %d steps woke several), %d ticks, %d holdings answered",
		len(calls), len(l.hs), placed, child, final, lower, reasons, prio, retained, waited, woken, rewaited, wokenFree, together, ticks, held)
	if hostTier && lower == 0 {
		t.Fatal("the run must place turns whose prefix a host tier holds")
	}
	if placed < want.placed || reasons[routing.ReasonCost] < want.cost || child == 0 || final < want.final {
		t.Fatalf("the run must place %d turns, %d by the routing cost, a sub-agent's among them, and %d sessions' last", want.placed, want.cost, want.final)
	}
	if want.woken > 0 && (woken < want.woken || prio == 0 || reasons[routing.ReasonPinned] == 0) {
		t.Fatalf("the run must make turns wait and wake %d, pin programs and set engine priorities", want.woken)
	}
	// Release the routes still waiting: the service closes under them.
	for _, h := range l.hs {
		h.svc.Close()
	}
	for _, ans := range l.pending {
		<-ans
	}
}

// route starts a live Route for turn at replica h; the answer comes on
// the channel.
func (l *replayLive) route(t *testing.T, h *harness, turn turns.Turn, hashes []uint64) chan routeAnswer {
	agent := &agentv1.AgentContext{SessionId: turn.Key.SessionID, ParentSessionId: turn.ParentSessionID, Tenant: turn.Key.Tenant,
		SessionFinal: turn.Final}
	l.agents[turn.RequestID] = agent
	out := make(chan routeAnswer, 1)
	req := &schedulerv1.RouteRequest{RequestId: turn.RequestID, Agent: agent, BlockSize: uint32(turn.BlockSize),
		BlockHashes: hashes, PromptTokens: uint32(turn.PromptTokens), Continued: turn.Continued}
	go func() {
		resp, err := h.client.Route(context.Background(), req)
		l.world.answered(chainKey(hashes))
		out <- routeAnswer{resp, err}
	}()
	return out
}

// hashesOf finds the hashes of a turn that waits in the Place that later
// places it (or none: it still waits at the end).
func (l *replayLive) hashesOf(calls []replay.Call, id string) []uint64 {
	for _, c := range calls {
		if c.Op == replay.CallPlace && c.Turn.RequestID == id {
			return toUint64s(c.Hashes)
		}
	}
	return nil
}

func (l *replayLive) check(t *testing.T, step string, p replay.Call, a routeAnswer) {
	t.Helper()
	if a.err != nil {
		t.Fatalf("%s: %v", step, a.err)
	}
	got := decision{Worker: a.resp.GetWorkerId(), Priority: a.resp.GetPriority(), Retain: time.Duration(a.resp.GetRetentionSeconds()) * time.Second}
	want := decision{Worker: p.Placement.Worker, Priority: p.Placement.Priority, Retain: p.Placement.Retain}
	if got != want {
		t.Fatalf("%s: live %+v, replay %+v (%s)", step, got, want, p.Placement.Reason)
	}
	l.workers[p.Turn.RequestID] = got.Worker
}

// showWoken sets the world the turns a finish or tick wakes will see:
// replay places them right after it, at the same instant, one after the
// other, each on the loads its engines had after the one before; live
// routes them concurrently, and the index lets each through only after the
// one before it in replay's order has been placed. (Admission names the
// worker of every turn it wakes, so in these runs neither the loads nor the
// order can change a woken turn's place; the order keeps the comparison
// exact where it could.)
func (l *replayLive) showWoken(next []replay.Call) (woken int) {
	var order []string
	for _, c := range wokenBy(next) {
		if c.Op == replay.CallPlace {
			l.world.know(c)
			order = append(order, chainKey(toUint64s(c.Hashes)))
		}
	}
	l.world.inOrder(order)
	return len(order)
}

// settled waits until every turn the step woke has been placed live (the
// Place calls that follow check where), and checks that no other waiting
// turn was.
func (l *replayLive) settled(t *testing.T, step string, next []replay.Call) {
	t.Helper()
	woke := map[string]bool{}
	for _, c := range wokenBy(next) {
		if c.Op != replay.CallPlace {
			continue
		}
		woke[c.Turn.RequestID] = true
		servicetest.Eventually(t, step+": "+c.Turn.RequestID+" placed live", func() bool { return len(l.pending[c.Turn.RequestID]) > 0 })
	}
	for id, ans := range l.pending {
		if !woke[id] && len(ans) > 0 {
			t.Fatalf("%s: the live route of %s answered; replay's still waits", step, id)
		}
	}
}

// stillBlocked checks that every live route replay left waiting is blocked.
func (l *replayLive) stillBlocked(t *testing.T, step string) {
	t.Helper()
	for id, ans := range l.pending {
		if len(ans) > 0 {
			t.Fatalf("%s: the live route of %s answered; replay's still waits", step, id)
		}
	}
}

// wokenBy is the woken Admit and Place calls right after a finish or tick.
func wokenBy(next []replay.Call) []replay.Call {
	n := 0
	for n < len(next) && (next[n].Op == replay.CallAdmit && next[n].Woken || next[n].Op == replay.CallPlace) {
		n++
	}
	return next[:n]
}

// stillWaiting is the turns told to wait that were never placed.
func stillWaiting(calls []replay.Call) []string {
	waiting := map[string]bool{}
	for _, c := range calls {
		switch {
		case c.Op == replay.CallAdmit && c.Admission.Verdict == admission.Wait:
			waiting[c.Turn.RequestID] = true
		case c.Op == replay.CallPlace:
			delete(waiting, c.Turn.RequestID)
		}
	}
	var out []string
	for id := range waiting {
		out = append(out, id)
	}
	return out
}

func toUint64s[H ~uint64](hs []H) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

// replayWorld is a flash indexer that answers as replay's index did, and
// reports the workers' loads as replay's engines had them.
type replayWorld struct {
	flashindexv1.UnimplementedFlashIndexerServiceServer
	hs       []*harness // the scheduler replicas, which every worker reports to
	mu       sync.Mutex
	cond     *sync.Cond                               // on mu: a route answered
	loads    map[string][]routing.Candidate           // by chain
	overlaps map[string][]*flashindexv1.WorkerOverlap // by chain
	// order names, for each turn a step woke, the one replay placed before
	// it; done the chains whose routes answered since.
	order    map[string]string
	done     map[string]bool
	resident map[string]*flashindexv1.ResidentAnswer // by worker and anchors
	// asked counts the holdings queries since askedSince; missing are the
	// workers of those replay did not answer.
	asked   int
	missing []string
}

func chainKey(hashes []uint64) string { return fmt.Sprint(hashes) }

// know makes the world what replay's was when it placed p: the index
// knows the prompt's overlaps, and the workers' loads are reported when it
// is asked (replay reads its engines' loads at each route, after any finish
// before it; the service reads them once the index answered).
func (w *replayWorld) know(p replay.Call) {
	var ov []*flashindexv1.WorkerOverlap
	for _, c := range p.Candidates {
		o := c.Overlap
		if o != (routing.Overlap{}) {
			ov = append(ov, &flashindexv1.WorkerOverlap{WorkerId: c.Worker, DeviceBlocks: uint32(o.Device), HostExtensionBlocks: uint32(o.HostExt),
				DiskExtensionBlocks: uint32(o.DiskExt), SharedBeyondDeviceBlocks: uint32(o.SharedBeyondDevice)})
		}
	}
	key := chainKey(toUint64s(p.Hashes))
	w.mu.Lock()
	w.overlaps[key] = ov
	w.loads[key] = p.Candidates
	w.mu.Unlock()
}

// inOrder makes the lookups of these chains wait for the one before.
func (w *replayWorld) inOrder(chains []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.order = map[string]string{}
	for i := 1; i < len(chains); i++ {
		w.order[chains[i]] = chains[i-1]
	}
	w.done = map[string]bool{}
}

// answered records that the route of chain has its answer.
func (w *replayWorld) answered(chain string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done[chain] = true
	w.cond.Broadcast()
}

// report has every worker report its load as replay's engines had it, to
// every replica.
func (w *replayWorld) report(loads []routing.Candidate) error {
	for _, h := range w.hs {
		for _, c := range loads {
			l := c.Reported
			if _, err := h.client.Heartbeat(context.Background(), &schedulerv1.HeartbeatRequest{WorkerId: c.Worker, Load: &workerv1.WorkerLoad{
				RunningRequests: uint32(l.RunningRequests), WaitingRequests: uint32(l.WaitingRequests), ActiveKvBlocks: uint32(l.ActiveBlocks)}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// holds records what replay's index said an idle program holds.
func (w *replayWorld) holds(c replay.Call) {
	a := &flashindexv1.ResidentAnswer{Anchor: uint32(c.Answer.Anchor), ChainBlocks: uint32(c.Answer.ChainBlocks)}
	if o := c.Answer.Overlap; o != (routing.Overlap{}) {
		a.Overlap = &flashindexv1.WorkerOverlap{WorkerId: c.Query.Worker, DeviceBlocks: uint32(o.Device), HostExtensionBlocks: uint32(o.HostExt),
			DiskExtensionBlocks: uint32(o.DiskExt)}
	}
	w.mu.Lock()
	w.resident[c.Query.Worker+" "+chainKey(toUint64s(c.Query.Hashes()))] = a
	w.mu.Unlock()
}

// FindMatches answers with the overlaps replay's index gave the prompt,
// once the turn woken before it (inOrder) is placed, and has the workers
// report the loads replay's engines had as replay placed it.
func (w *replayWorld) FindMatches(ctx context.Context, req *flashindexv1.FindMatchesRequest) (*flashindexv1.FindMatchesResponse, error) {
	hashes := req.GetHashes().GetBlockHashes()
	key := chainKey(hashes)
	w.mu.Lock()
	deadline := time.Now().Add(10 * time.Second)
	for before, ok := w.order[key]; ok && !w.done[before]; {
		if time.Now().After(deadline) || ctx.Err() != nil {
			w.mu.Unlock()
			return nil, fmt.Errorf("the turn woken before this one was never placed")
		}
		w.wait()
	}
	ov, loads := w.overlaps[key], w.loads[key]
	w.mu.Unlock()
	if err := w.report(loads); err != nil {
		return nil, err
	}
	return &flashindexv1.FindMatchesResponse{QueryBlocks: uint32(len(hashes)), Overlaps: ov}, nil
}

// wait waits on the world's condition for at most 100 ms (w.mu held).
func (w *replayWorld) wait() {
	t := time.AfterFunc(100*time.Millisecond, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	w.cond.Wait()
	t.Stop()
}

// FindResident answers with what replay's index said each idle program
// holds; a query replay's pipeline did not ask is counted as missing.
func (w *replayWorld) FindResident(_ context.Context, req *flashindexv1.FindResidentRequest) (*flashindexv1.FindResidentResponse, error) {
	resp := &flashindexv1.FindResidentResponse{}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range req.GetQueries() {
		w.asked++
		a, ok := w.resident[q.GetWorkerId()+" "+chainKey(q.GetAnchors())]
		if !ok {
			w.missing = append(w.missing, q.GetWorkerId())
			a = &flashindexv1.ResidentAnswer{}
		}
		resp.Answers = append(resp.Answers, a)
	}
	return resp, nil
}

// askedSince is how many holdings queries came since the last call, and
// the workers of those replay had no answer to.
func (w *replayWorld) askedSince() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, missing := w.asked, w.missing
	w.asked, w.missing = 0, nil
	return n, missing
}
