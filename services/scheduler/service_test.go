package scheduler

import (
	"context"
	"errors"
	"fmt"
	dto "github.com/prometheus/client_model/go"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a fake clock the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// set moves the clock to at (never back).
func (c *clock) set(at time.Time) {
	c.mu.Lock()
	if at.After(c.now) {
		c.now = at
	}
	c.mu.Unlock()
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fakeIndex is a flash indexer that answers FindMatches from a table.
type fakeIndex struct {
	flashindexv1.UnimplementedFlashIndexerServiceServer
	mu       sync.Mutex
	overlaps []*flashindexv1.WorkerOverlap
	fail     bool
	queries  int
	// Predict-on-route: PredictRoute calls, lookups that asked for predictions.
	predicted     []*flashindexv1.PredictRouteRequest
	withPredicted int
	// chains, when set, keeps the queries' chains as an indexer does;
	// wholes are the queries' chains, bases expanded, and based how many
	// named a base.
	chains *basecache.Chains
	wholes [][]uint64
	based  int
	asked  []*flashindexv1.FindMatchesRequest // every lookup, as sent
}

func (f *fakeIndex) set(fail bool, ov ...*flashindexv1.WorkerOverlap) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.overlaps = fail, ov
}

func (f *fakeIndex) FindMatches(_ context.Context, req *flashindexv1.FindMatchesRequest) (*flashindexv1.FindMatchesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	f.asked = append(f.asked, proto.Clone(req).(*flashindexv1.FindMatchesRequest))
	if req.GetIncludePredicted() {
		f.withPredicted++
	}
	if f.fail {
		return nil, status.Error(codes.Unavailable, "index down")
	}
	chain := basecache.Whole(req.GetHashes().GetBlockHashes())
	if b := req.GetHashes().GetBase(); b != nil {
		f.based++
		var err error
		if chain, err = f.chains.Expand(b.GetKey(), int(b.GetBlocks()), chain.Hashes); err != nil {
			return nil, status.Error(codes.NotFound, err.Error())
		}
	}
	f.wholes = append(f.wholes, chain.Hashes)
	var kept uint64
	if req.GetHashes().GetKeep() {
		kept = f.chains.Keep(chain)
	}
	return &flashindexv1.FindMatchesResponse{QueryBlocks: uint32(len(chain.Hashes)), Overlaps: f.overlaps, ChainKept: kept}, nil
}

type harness struct {
	svc    *Service
	client schedulerv1.SchedulerServiceClient
	index  *fakeIndex
	clock  *clock
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	index := &fakeIndex{}
	h := newHarnessIndex(t, mod, index)
	h.index = index
	return h
}

// newHarnessIndex serves the scheduler with index as its flash indexer.
func newHarnessIndex(t *testing.T, mod func(*Config), index flashindexv1.FlashIndexerServiceServer, opts ...Option) *harness {
	t.Helper()
	h := &harness{clock: &clock{now: t0}}
	idx := servicetest.ServeBufconn(t, func(g *grpc.Server) { flashindexv1.RegisterFlashIndexerServiceServer(g, index) })
	cfg := DefaultConfig()
	cfg.Seed = 1
	if mod != nil {
		mod(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := newService(cfg, log, prometheus.NewRegistry(), func(s string) string { return "switchyard_scheduler_" + s },
		append([]Option{WithFlashIndexer(flashindexv1.NewFlashIndexerServiceClient(idx)), WithClock(h.clock.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	h.svc = svc
	h.client = schedulerv1.NewSchedulerServiceClient(servicetest.ServeBufconn(t, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, svc) }))
	return h
}

func worker(id string, capTokens uint64) *workerv1.Worker {
	return &workerv1.Worker{WorkerId: id, Address: "shim-" + id + ":9500", Engine: "sim", BlockSize: 16, Epoch: 1,
		Capacity: &workerv1.WorkerCapacity{KvCapacityTokens: capTokens, MaxRunningRequests: 64}}
}

func (h *harness) register(t *testing.T, ws ...*workerv1.Worker) {
	t.Helper()
	for _, w := range ws {
		resp, err := h.client.RegisterWorker(context.Background(), &schedulerv1.RegisterWorkerRequest{Worker: w})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetLeaseTtl().AsDuration() != h.svc.cfg.LeaseTTL {
			t.Fatalf("lease %v", resp.GetLeaseTtl().AsDuration())
		}
	}
}

func hashes(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(1000 + i)
	}
	return out
}

func routeReq(id, session string, promptTokens int) *schedulerv1.RouteRequest {
	return &schedulerv1.RouteRequest{RequestId: id, Agent: &agentv1.AgentContext{SessionId: session, Tenant: "t"},
		BlockSize: 16, BlockHashes: hashes(promptTokens / 16), PromptTokens: uint32(promptTokens)}
}

func finishReq(id, worker, session string, prompt, completion int) *schedulerv1.FinishRequestRequest {
	return &schedulerv1.FinishRequestRequest{RequestId: id, WorkerId: worker, Agent: &agentv1.AgentContext{SessionId: session, Tenant: "t"},
		Usage: &enginev1.Usage{PromptTokens: uint32(prompt), CompletionTokens: uint32(completion)}, FinishReason: enginev1.FinishReason_FINISH_REASON_TOOL_CALLS}
}

func TestRegisterRouteFinish(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20), worker("w2", 1<<20))
	h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w2", DeviceBlocks: 6, HostExtensionBlocks: 2})

	resp, err := h.client.Route(ctx, routeReq("r1", "s", 160))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetWorkerId() != "w2" || resp.GetWorkerAddress() != "shim-w2:9500" || resp.GetPolicy() != "kv" {
		t.Fatalf("route %v", resp)
	}
	if len(resp.GetScores()) != 2 {
		t.Fatalf("scores %v", resp.GetScores())
	}
	for _, sc := range resp.GetScores() {
		if sc.GetWorkerId() == "w2" {
			// credit 6 + 0.75·2 = 7.5; prefill 10 − 7.5; decode 10.
			if !sc.GetChosen() || sc.GetCreditBlocks() != 7.5 || sc.GetCost() != 12.5 || sc.GetDeviceOverlapBlocks() != 6 {
				t.Fatalf("w2 score %v", sc)
			}
		}
	}
	if h.svc.pipe.Router().Load().Worker("w2").Requests != 1 {
		t.Fatal("route did not record the load")
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("r1", "w2", "s", 160, 20)); err != nil {
		t.Fatal(err)
	}
	if h.svc.pipe.Router().Load().Len() != 0 {
		t.Fatal("finish did not free the load")
	}
	// Finishing twice is harmless.
	if _, err := h.client.FinishRequest(ctx, finishReq("r1", "w2", "s", 160, 20)); err != nil {
		t.Fatal(err)
	}
	ws, err := h.client.ListWorkers(ctx, &schedulerv1.ListWorkersRequest{})
	if err != nil || len(ws.GetWorkers()) != 2 || ws.GetLeaseTtl().AsDuration() != h.svc.cfg.LeaseTTL {
		t.Fatalf("list workers %v %v", ws, err)
	}
}

func TestIndexerFailureStillRoutes(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, worker("w1", 1<<20))
	h.index.set(true)
	resp, err := h.client.Route(context.Background(), routeReq("r1", "", 64))
	if err != nil || resp.GetWorkerId() != "w1" {
		t.Fatalf("route %v %v", resp, err)
	}
}

func TestErrors(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	check := func(name string, err error, want codes.Code) {
		t.Helper()
		if status.Code(err) != want {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	_, err := h.client.Route(ctx, routeReq("r", "s", 32))
	check("route with no workers", err, codes.Unavailable)
	_, err = h.client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: "ghost"})
	check("heartbeat of an unknown worker", err, codes.NotFound)
	_, err = h.client.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: &workerv1.Worker{WorkerId: "x"}})
	check("register without address", err, codes.InvalidArgument)
	h.register(t, worker("w1", 1<<20))
	_, err = h.client.Route(ctx, &schedulerv1.RouteRequest{})
	check("route without request id", err, codes.InvalidArgument)
	r := routeReq("r", "s", 32)
	r.Policy = "random"
	_, err = h.client.Route(ctx, r)
	check("unknown policy", err, codes.InvalidArgument)
	r = routeReq("r", "s", 32)
	r.ExcludeWorkers = make([]string, maxExcludeWorkers+1)
	_, err = h.client.Route(ctx, r)
	check("too many excluded workers", err, codes.InvalidArgument)
	_, err = h.client.GetProgram(ctx, &schedulerv1.GetProgramRequest{SessionId: "nope"})
	check("unknown program", err, codes.NotFound)
	_, err = h.client.DeregisterWorker(ctx, &schedulerv1.DeregisterWorkerRequest{WorkerId: "ghost"})
	check("deregister unknown", err, codes.NotFound)
}

func recvWorker(t *testing.T, s grpc.ServerStreamingClient[schedulerv1.WatchWorkersResponse]) (schedulerv1.WorkerEventType, string) {
	t.Helper()
	ev, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return ev.GetType(), ev.GetWorker().GetWorkerId()
}

func TestLeaseExpiryAndWatchWorkers(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.register(t, worker("w1", 1<<20))
	stream, err := h.client.WatchWorkers(ctx, &schedulerv1.WatchWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if typ, id := recvWorker(t, stream); typ != schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED || id != "w1" {
		t.Fatalf("got %v %s", typ, id)
	}
	if typ, _ := recvWorker(t, stream); typ != schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED {
		t.Fatalf("got %v", typ)
	}
	// A heartbeat wakes nobody; a new worker does.
	h.clock.Advance(5 * time.Second)
	if _, err := h.client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: "w1", Load: &workerv1.WorkerLoad{RunningRequests: 2}}); err != nil {
		t.Fatal(err)
	}
	h.register(t, worker("w2", 1<<20))
	if typ, id := recvWorker(t, stream); typ != schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED || id != "w2" {
		t.Fatalf("got %v %s", typ, id)
	}
	// w1 was renewed at +5 s, w2 registered at +5 s: at +15 s both lapse.
	h.clock.Advance(10*time.Second - time.Millisecond)
	h.svc.expireLeases()
	if h.svc.reg.Len() != 2 {
		t.Fatal("expired early")
	}
	if _, err := h.client.Route(ctx, routeReq("r1", "s", 32)); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Millisecond)
	h.svc.expireLeases()
	got := map[string]schedulerv1.WorkerEventType{}
	for range 2 {
		typ, id := recvWorker(t, stream)
		got[id] = typ
	}
	for _, id := range []string{"w1", "w2"} {
		if got[id] != schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED {
			t.Fatalf("events %v", got)
		}
	}
	for _, id := range []string{"w1", "w2"} {
		if l := h.svc.pipe.Router().Load().Worker(id); l != (routing.Tracked{}) {
			t.Fatalf("load of removed worker %s kept: %+v", id, l)
		}
	}
	// The turn in flight there still ends when its finish comes.
	if _, err := h.client.FinishRequest(ctx, &schedulerv1.FinishRequestRequest{RequestId: "r1"}); err != nil || h.svc.pipe.Router().Load().Len() != 0 {
		t.Fatalf("finish of a turn whose worker left: %v, %d requests in flight", err, h.svc.pipe.Router().Load().Len())
	}
	_, err = h.client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: "w1"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("heartbeat after expiry: %v", err)
	}
}

// sessionAwareThunderAgent selects session_aware with ThunderAgent's
// ACTING weight of 1, which pausedSetup's arithmetic assumes.
//
// The thresholds and the waiting are ThunderAgent's: a paused program's
// turn blocks in Route until its resume (no cold lane, no rotation).
func sessionAwareThunderAgent(c *Config) {
	c.Policy = "session_aware"
	ta := admission.ThunderAgentConfig()
	a := &c.Admission
	a.ActingTokenWeight, a.ActingDecayTau = 1, ta.ActingDecayTau
	a.PauseThreshold, a.PauseTarget, a.SoftDemoteThreshold, a.ResumeHysteresis = ta.PauseThreshold, ta.PauseTarget, ta.SoftDemoteThreshold, ta.ResumeHysteresis
	a.ColdLane, a.ResidentRetention, a.RotateAfter, a.ResumeOrder = 0, 0, 0, ta.ResumeOrder
}

// pausedSetup leaves program "small" PAUSED on a worker of 10,000 tokens
// and "big" (7,800 tokens) ACTING since the clock's now.
func pausedSetup(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	h.register(t, worker("w1", 10_000))
	if _, err := h.client.Route(ctx, routeReq("s1", "small", 2_000)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("s1", "w1", "small", 2_000, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Route(ctx, routeReq("b1", "big", 7_792)); err != nil {
		t.Fatal(err)
	}
	h.svc.tick(context.Background()) // 2,100 + 7,892 > 9,500: small is paused
	if _, err := h.client.FinishRequest(ctx, finishReq("b1", "w1", "big", 7_700, 100)); err != nil {
		t.Fatal(err)
	}
	p, err := h.client.GetProgram(ctx, &schedulerv1.GetProgramRequest{SessionId: "small", Tenant: "t"})
	if err != nil || p.GetProgram().GetLifecycle() != schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED {
		t.Fatalf("small: %v %v", p, err)
	}
}

func (h *harness) waiting(key admission.Key) int {
	h.svc.mu.Lock()
	defer h.svc.mu.Unlock()
	p, _ := h.svc.ctrl.Get(key)
	return p.Waiting
}

func TestPausedProgramRouteBlocksUntilResumed(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := h.client.WatchPrograms(ctx, &schedulerv1.WatchProgramsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := watch.Recv(); err != nil || ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED {
		t.Fatalf("first event of an empty table: %v %v", ev, err)
	}
	pausedSetup(t, h)

	type result struct {
		resp *schedulerv1.RouteResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := h.client.Route(ctx, routeReq("s2", "small", 2_100))
		done <- result{resp, err}
	}()
	key := admission.Key{Tenant: "t", SessionID: "small"}
	servicetest.Eventually(t, "the paused program's turn to wait", func() bool {
		select {
		case r := <-done:
			t.Fatalf("route of a paused program returned: %v %v", r.resp, r.err)
		default:
		}
		return h.waiting(key) != 0
	})
	// A tick with no room yet resumes nothing: the call stays blocked.
	h.clock.Advance(100 * time.Millisecond)
	h.svc.tick(context.Background())
	if h.waiting(key) != 1 {
		t.Fatal("turn released without a resume")
	}
	// big's tool call decays (3 s = 2^-3): room below the 0.85 ceiling.
	h.clock.Advance(3 * time.Second)
	h.svc.tick(context.Background())
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.GetWorkerId() != "w1" || r.resp.GetAdmissionWait().AsDuration() != 3100*time.Millisecond {
		t.Fatalf("route %v", r.resp)
	}
	// The first turn after a resume jumps the engine's queue.
	if r.resp.GetPriorityJump() != 1 || r.resp.GetPriority() != -1 {
		t.Fatalf("resumed turn: priority_jump %v priority %d, want 1 and -1", r.resp.GetPriorityJump(), r.resp.GetPriority())
	}
	// Every lifecycle change was streamed, in order.
	var reasons []string
	for len(reasons) < 8 {
		ev, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, ev.GetProgram().GetSessionId()+":"+ev.GetReason())
	}
	want := "small:admitted small:placed small:acting big:admitted big:placed small:paused big:acting small:resumed"
	if got := strings.Join(reasons, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
}

func TestPausedRouteHonoursDeadline(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	pausedSetup(t, h)
	waits := func() uint64 {
		var m dto.Metric
		h.svc.metrics.admissionWait.Write(&m)
		return m.GetHistogram().GetSampleCount()
	}
	before := waits()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := h.client.Route(ctx, routeReq("s2", "small", 2_100))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	key := admission.Key{Tenant: "t", SessionID: "small"}
	// The server notices the deadline on its own clock.
	servicetest.Eventually(t, "the server to drop the timed-out turn", func() bool { return h.waiting(key) == 0 })
	// The wait given up is in the admission-wait histogram, as a wait.
	servicetest.Eventually(t, "the timed-out wait to be observed", func() bool { return waits() == before+1 })
	// The program is still there, paused, and its next turn will run once
	// resumed.
	p, err := h.client.GetProgram(context.Background(), &schedulerv1.GetProgramRequest{SessionId: "small", Tenant: "t"})
	if err != nil || p.GetProgram().GetLifecycle() != schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED {
		t.Fatalf("%v %v", p, err)
	}
}

func TestShutdownReleasesBlockedRoute(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	pausedSetup(t, h)
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Route(context.Background(), routeReq("s2", "small", 2_100))
		done <- err
	}()
	servicetest.Eventually(t, "the turn to wait", func() bool { return h.waiting(admission.Key{Tenant: "t", SessionID: "small"}) != 0 })
	h.svc.Close()
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v, want Unavailable", err)
	}
}

func TestSessionFinalReleasesProgram(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	h.client.Route(ctx, routeReq("a", "s", 64))
	h.client.FinishRequest(ctx, finishReq("a", "w1", "s", 64, 10))
	final := routeReq("b", "s", 80)
	final.Agent.SessionFinal = true
	if _, err := h.client.Route(ctx, final); err != nil {
		t.Fatal(err)
	}
	// Released when the final turn ends, not while it runs.
	terminated := &schedulerv1.ListProgramsRequest{Lifecycle: schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_TERMINATED}
	if lst, err := h.client.ListPrograms(ctx, terminated); err != nil || len(lst.GetPrograms()) != 0 {
		t.Fatalf("released while its final turn runs: %v %v", lst, err)
	}
	h.client.FinishRequest(ctx, finishReq("b", "w1", "s", 80, 10))
	lst, err := h.client.ListPrograms(ctx, terminated)
	if err != nil || len(lst.GetPrograms()) != 1 || lst.GetPrograms()[0].GetSessionId() != "s" {
		t.Fatalf("%v %v", lst, err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Admission.TickInterval = time.Millisecond
		c.LeaseCheckInterval = time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.svc.Run(ctx) }()
	h.register(t, worker("w1", 1<<20))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// holdIndex is a flash indexer whose FindResident answers only when its
// caller gives up. Asked the first time, it calls stop (shutdown begins
// while the lookup is in flight) and reports on found how the lookup's
// context ended: cancelled by the stop, or at its own deadline.
type holdIndex struct {
	staticIndex
	stop  func()
	once  sync.Once
	found chan error
}

func (x *holdIndex) FindResident(ctx context.Context, _ *flashindexv1.FindResidentRequest, _ ...grpc.CallOption) (*flashindexv1.FindResidentResponse, error) {
	first := false
	x.once.Do(func() {
		x.stop()
		first = true
	})
	<-ctx.Done()
	if first {
		x.found <- ctx.Err()
	}
	return nil, status.FromContextError(ctx.Err()).Err()
}

// Shutdown does not wait for a tick's lookup of what idle programs hold
// (up to half a tick interval): the end of Run's context, which servicekit
// ends as shutdown begins, cancels it, and so does Close.
func TestStopCancelsTheHoldingsLookup(t *testing.T) {
	for _, how := range []string{"context", "Close"} {
		t.Run(how, func(t *testing.T) {
			idx := &holdIndex{staticIndex: staticIndex{resp: []*flashindexv1.FindMatchesResponse{{}}}, found: make(chan error, 1)}
			cfg := DefaultConfig()
			cfg.Seed, cfg.Policy, cfg.WorkerHealthInterval = 1, "session_aware", 0
			// A lookup deadline (half of it) far beyond the moment the
			// stop takes.
			cfg.Admission.TickInterval = 400 * time.Millisecond
			s, err := newService(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
				func(n string) string { return "switchyard_scheduler_" + n }, WithFlashIndexer(idx))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			idx.stop = cancel
			if how == "Close" {
				idx.stop = s.Close
			}
			// An idle program in a tool call, which the tick asks about.
			if _, err := s.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: worker("w1", 1<<20)}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Route(ctx, routeReq("r1", "s", 1_600)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FinishRequest(ctx, finishReq("r1", "w1", "s", 1_600, 10)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			var lookup error
			select {
			case lookup = <-idx.found:
			case <-time.After(servicetest.Patience):
				t.Fatal("no tick asked what the idle program holds")
			}
			servicetest.Within(t, done, "Run to return with a holdings lookup in flight")
			// Without the stop's cancel the lookup would have run to its
			// deadline, half a tick interval.
			if !errors.Is(lookup, context.Canceled) {
				t.Fatalf("the holdings lookup ended %v, want cancelled by the stop", lookup)
			}
		})
	}
}

// TestServedThroughServicekit runs the real shell: gRPC and the REST gateway
// on loopback.
func TestServedThroughServicekit(t *testing.T) {
	opts := servicekit.DefaultOptions("scheduler")
	opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	opts.ShutdownNotice = 0 // the test stops at once
	cfg := DefaultConfig()
	cfg.FlashIndexerAddr = "127.0.0.1:1" // unreachable: routes go on without overlap
	cfg.WorkerHealthInterval = 0         // w1 has no shim to answer health checks
	run, _ := servicetest.Start(t, opts, func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	srv, ctx := run.Server, context.Background()
	client := schedulerv1.NewSchedulerServiceClient(run.Conn)
	if _, err := client.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: worker("w1", 1<<20)}); err != nil {
		t.Fatal(err)
	}
	if body := servicetest.Get(t, "http://"+srv.HTTPAddr()+"/v1/workers"); !strings.Contains(body, `"workerId":"w1"`) {
		t.Fatalf("GET /v1/workers: %s", body)
	}
	resp, err := http.Post(fmt.Sprintf("http://%s/v1/requests/r1/prefill-complete", srv.HTTPAddr()), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/requests/r1/prefill-complete: %d", resp.StatusCode)
	}
	if body := servicetest.Get(t, "http://"+srv.HTTPAddr()+"/metrics"); !strings.Contains(body, "switchyard_scheduler_workers 1") {
		t.Fatalf("metrics lack the worker gauge:\n%s", body)
	}
	_ = errors.New
}
