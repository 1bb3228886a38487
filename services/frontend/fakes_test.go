package frontend

import (
	"context"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/tokenizer"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// fakeScheduler routes every request to one shim (the first of workerID
// and others that the request does not exclude) and records what it saw.
type fakeScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	mu       sync.Mutex
	workerID string
	addr     string
	others   []fakeTarget
	routeErr error
	// routeErrs are answered first, one per Route call (then routeErr).
	routeErrs []error
	routes    []*schedulerv1.RouteRequest
	finishes  []*schedulerv1.FinishRequestRequest
	finished  chan struct{}
	programs  []*schedulerv1.Program // what ListPrograms lists
	priority  int32                  // RouteResponse.priority
	retention uint32                 // RouteResponse.retention_seconds
	// routeDelay: each Route call takes at least this long (admission
	// holding the turn).
	routeDelay time.Duration
	// events is the order of the calls about each request: "route",
	// "prefilled", "finish".
	events []string
	// chains, when set, keeps the routes' chains as a scheduler does, and
	// wholes are the chains of the routes answered, bases expanded.
	chains *basecache.Chains
	wholes [][]uint64
	// sessionsErr, when set, is ListSessions' answer, after sessionsDelay;
	// sessionsCalls counts the calls.
	sessionsErr   error
	sessionsDelay time.Duration
	sessionsCalls int
	// frozen: Route and (when register registered it) the health service
	// hang, as in a stopped process.
	frozen atomic.Bool
}

// register serves the scheduler and its health on s.
func (f *fakeScheduler) register(s *grpc.Server) {
	schedulerv1.RegisterSchedulerServiceServer(s, f)
	healthpb.RegisterHealthServer(s, &fakeHealth{frozen: f.frozen.Load})
}

func (f *fakeScheduler) MarkPrefillComplete(_ context.Context, r *schedulerv1.MarkPrefillCompleteRequest) (*schedulerv1.MarkPrefillCompleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, r.GetRequestId()+":prefilled")
	return &schedulerv1.MarkPrefillCompleteResponse{}, nil
}

func (f *fakeScheduler) Route(ctx context.Context, r *schedulerv1.RouteRequest) (*schedulerv1.RouteResponse, error) {
	if f.frozen.Load() { // a stopped process: the call waits until its caller gives up
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	f.mu.Lock()
	delay := f.routeDelay
	f.mu.Unlock()
	time.Sleep(delay) // outside the lock: other calls go on meanwhile
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes = append(f.routes, proto.Clone(r).(*schedulerv1.RouteRequest))
	if len(f.routeErrs) > 0 {
		err := f.routeErrs[0]
		f.routeErrs = f.routeErrs[1:]
		return nil, err
	}
	if f.routeErr != nil {
		return nil, f.routeErr
	}
	chain := basecache.Whole(r.GetBlockHashes())
	if b := r.GetBase(); b != nil {
		var err error
		if chain, err = f.chains.Expand(b.GetKey(), int(b.GetBlocks()), r.GetBlockHashes()); err != nil {
			return nil, status.Error(codes.NotFound, err.Error())
		}
	}
	for _, w := range append([]fakeTarget{{f.workerID, f.addr}}, f.others...) {
		if !slices.Contains(r.GetExcludeWorkers(), w.id) {
			f.events = append(f.events, r.GetRequestId()+":route")
			f.wholes = append(f.wholes, chain.Hashes)
			return &schedulerv1.RouteResponse{WorkerId: w.id, WorkerAddress: w.addr, Policy: "fake", Priority: f.priority, RetentionSeconds: f.retention,
				ChainKept: f.chains.Keep(chain)}, nil
		}
	}
	return nil, status.Error(codes.FailedPrecondition, "the turn already failed on every live worker")
}

// fakeTarget is a worker the fake scheduler routes to.
type fakeTarget struct{ id, addr string }

// routeCalls returns a copy of the Route requests seen so far.
func (f *fakeScheduler) routeCalls() []*schedulerv1.RouteRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.routes)
}

// finishCalls returns a copy of the FinishRequest requests seen so far.
func (f *fakeScheduler) finishCalls() []*schedulerv1.FinishRequestRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.finishes)
}

func (f *fakeScheduler) FinishRequest(_ context.Context, r *schedulerv1.FinishRequestRequest) (*schedulerv1.FinishRequestResponse, error) {
	f.mu.Lock()
	f.finishes = append(f.finishes, proto.Clone(r).(*schedulerv1.FinishRequestRequest))
	f.events = append(f.events, r.GetRequestId()+":finish")
	f.mu.Unlock()
	select {
	case f.finished <- struct{}{}:
	default:
	}
	return &schedulerv1.FinishRequestResponse{}, nil
}

// ListSessions answers from the turns it saw finish, each FinishRequest a
// turn and its index the clock: enough to check the admin API's scope and
// its merge over replicas (the scheduler's tests check its own ledger).
func (f *fakeScheduler) ListSessions(_ context.Context, r *schedulerv1.ListSessionsRequest) (*schedulerv1.ListSessionsResponse, error) {
	f.mu.Lock()
	f.sessionsCalls++
	err, delay := f.sessionsErr, f.sessionsDelay
	f.mu.Unlock()
	if err != nil {
		time.Sleep(delay)
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	by := map[string]*schedulerv1.SessionUsage{}
	resp := &schedulerv1.ListSessionsResponse{}
	for i, fr := range f.finishes {
		a := fr.GetAgent()
		if r.GetTenant() != "" && a.GetTenant() != r.GetTenant() || r.GetSessionId() != "" && a.GetSessionId() != r.GetSessionId() {
			continue
		}
		at := timestamppb.New(time.Unix(int64(i), 0))
		u := by[sessionKey(a.GetTenant(), a.GetSessionId())]
		if u == nil {
			u = &schedulerv1.SessionUsage{FirstSeen: at}
			by[sessionKey(a.GetTenant(), a.GetSessionId())] = u
			resp.Sessions = append(resp.Sessions, u)
		}
		u.Agent, u.LastWorkerId, u.LastSeen = a, fr.GetWorkerId(), at
		turn := &schedulerv1.UsageTotals{Turns: 1, PromptTokens: uint64(fr.GetUsage().GetPromptTokens()),
			CompletionTokens: uint64(fr.GetUsage().GetCompletionTokens()), CachedTokens: uint64(fr.GetUsage().GetCachedTokens())}
		u.Totals, resp.Totals = sumTotals(u.Totals, turn), sumTotals(resp.Totals, turn)
		u.RecentTurns = append(u.RecentTurns, &schedulerv1.TurnUsage{RequestId: fr.GetRequestId(), WorkerId: fr.GetWorkerId(),
			PromptTokens: fr.GetUsage().GetPromptTokens(), CachedTokens: fr.GetUsage().GetCachedTokens(),
			TtftMs: fr.GetTtftMs(), TotalMs: fr.GetTotalMs(), FinishReason: fr.GetFinishReason(), FinishedAt: at})
	}
	return resp, nil
}

// ListPrograms lists its programs of the tenant asked.
func (f *fakeScheduler) ListPrograms(_ context.Context, r *schedulerv1.ListProgramsRequest) (*schedulerv1.ListProgramsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &schedulerv1.ListProgramsResponse{}
	for _, p := range f.programs {
		if r.GetTenant() == "" || p.GetTenant() == r.GetTenant() {
			resp.Programs = append(resp.Programs, p)
		}
	}
	return resp, nil
}

// ListWorkers lists the workers it routes to.
func (f *fakeScheduler) ListWorkers(context.Context, *schedulerv1.ListWorkersRequest) (*schedulerv1.ListWorkersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &schedulerv1.ListWorkersResponse{LeaseTtl: durationpb.New(10 * time.Second)}
	for _, w := range append([]fakeTarget{{f.workerID, f.addr}}, f.others...) {
		resp.Workers = append(resp.Workers, &workerv1.Worker{WorkerId: w.id, Address: w.addr, Engine: "fake",
			Load: &workerv1.WorkerLoad{RunningRequests: 1, UsedKvBlocks: 10, TotalKvBlocks: 100, EvictedBlocks: proto.Uint64(3)}})
	}
	return resp, nil
}

func (f *fakeScheduler) lastRoute() *schedulerv1.RouteRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.routes) == 0 {
		return nil
	}
	return f.routes[len(f.routes)-1]
}

// fakeShim generates a fixed answer and reports as cached the longest prefix
// of whole blocks it has seen before (a tiny prefix cache), so the second turn
// of a session is a hit exactly when its prompt extends the first.
type fakeShim struct {
	enginev1.UnimplementedEngineShimServiceServer
	workerID  string
	blockSize int
	answer    []uint32
	mu        sync.Mutex
	seen      map[uint64]bool
	reqs      []*enginev1.GenerateRequest
	// hang: after one delta, wait for cancellation and record it.
	hang      bool
	cancelled chan struct{}
	started   chan struct{}
	// failBefore ends Generate with it before any message (io.EOF: a
	// stream closed without a message); failAfter after the first delta.
	failBefore, failAfter error
	// stall: before any message, wait for cancellation (closing started,
	// then cancelled).
	stall bool
	// frozen: health checks hang too (a stopped process); with stall or
	// hang, the frontend's silence probe must find it dead.
	frozen bool
	// delay: wait this long before the first message (a long prefill).
	delay time.Duration
	// engineMs, when set, is the engine's time the result reports.
	engineMs float64
	// keep: like an engine shim, keep each whole prompt (kept, by its last
	// block hash) and take a base from it; wholes are the requests with
	// their prompts whole, in order.
	keep   bool
	kept   map[uint64]*enginev1.GenerateRequest
	wholes []*enginev1.GenerateRequest
}

// whole is r with its prompt whole, the base's blocks put back; a base the
// fake does not keep is NOT_FOUND, as the shim answers.
func (f *fakeShim) whole(r *enginev1.GenerateRequest) (*enginev1.GenerateRequest, error) {
	w := proto.Clone(r).(*enginev1.GenerateRequest)
	if b := r.GetBase(); b != nil {
		k := f.kept[b.GetKey()]
		if !f.keep || k == nil || int(b.GetBlocks()) > len(k.GetBlockHashes()) {
			return nil, status.Errorf(codes.NotFound, "prompt base %016x not held", b.GetKey())
		}
		n := int(b.GetBlocks())
		w.Base = nil
		w.TokenIds = append(slices.Clone(k.GetTokenIds()[:n*f.blockSize]), r.GetTokenIds()...)
		w.BlockHashes = append(slices.Clone(k.GetBlockHashes()[:n]), r.GetBlockHashes()...)
	}
	if h := w.GetBlockHashes(); f.keep && len(h) > 0 {
		if f.kept == nil {
			f.kept = map[uint64]*enginev1.GenerateRequest{}
		}
		f.kept[h[len(h)-1]] = w
	}
	f.wholes = append(f.wholes, w)
	return w, nil
}

func (f *fakeShim) Generate(r *enginev1.GenerateRequest, stream grpc.ServerStreamingServer[enginev1.GenerateResponse]) error {
	f.mu.Lock()
	f.reqs = append(f.reqs, proto.Clone(r).(*enginev1.GenerateRequest))
	r, err := f.whole(r)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	var kept uint64
	if h := r.GetBlockHashes(); f.keep && len(h) > 0 {
		kept = h[len(h)-1]
	}
	cached := 0
	for _, h := range r.GetBlockHashes() {
		if !f.seen[h] {
			break
		}
		cached += f.blockSize
	}
	for _, h := range r.GetBlockHashes() {
		f.seen[h] = true
	}
	failBefore, failAfter, delay := f.failBefore, f.failAfter, f.delay
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	switch {
	case failBefore == io.EOF:
		return nil
	case failBefore != nil:
		return failBefore
	case f.stall:
		close(f.started)
		<-stream.Context().Done()
		close(f.cancelled)
		return status.FromContextError(stream.Context().Err()).Err()
	}
	// Like a greedy engine, the fake continues its answer when the prompt
	// already ends with part of it (a migrated turn's carried tokens).
	out := append([]uint32(nil), f.answer[answered(r.GetTokenIds(), f.answer):]...)
	finish := enginev1.FinishReason_FINISH_REASON_STOP
	if max := int(r.GetSampling().GetMaxTokens()); max > 0 && len(out) > max {
		out, finish = out[:max], enginev1.FinishReason_FINISH_REASON_LENGTH
	}
	if len(r.GetToolCallTokenIds()) > 0 {
		out = append(out, r.GetToolCallTokenIds()...)
		finish = enginev1.FinishReason_FINISH_REASON_TOOL_CALLS
	}
	if f.hang {
		if err := stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Delta{Delta: &enginev1.TokenDelta{TokenIds: out[:1]}}}); err != nil {
			return err
		}
		close(f.started)
		<-stream.Context().Done()
		close(f.cancelled)
		return status.FromContextError(stream.Context().Err()).Err()
	}
	// Two tokens per message, like an engine's batched deltas.
	for i := 0; i < len(out); i += 2 {
		j := min(i+2, len(out))
		if err := stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Delta{Delta: &enginev1.TokenDelta{TokenIds: out[i:j]}}}); err != nil {
			return err
		}
		if failAfter != nil {
			return failAfter
		}
	}
	var timing *enginev1.Timing
	if f.engineMs > 0 {
		timing = &enginev1.Timing{TotalMs: f.engineMs}
	}
	return stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Result{Result: &enginev1.GenerateResult{
		FinishReason: finish, WorkerId: f.workerID, PromptKept: kept, Timing: timing,
		Usage: &enginev1.Usage{PromptTokens: uint32(len(r.GetTokenIds())), CompletionTokens: uint32(len(out)), CachedTokens: uint32(cached)},
	}}})
}

// answered is how many leading tokens of answer the prompt ends with.
func answered(prompt, answer []uint32) int {
	for n := min(len(prompt), len(answer)); n > 0; n-- {
		if slices.Equal(prompt[len(prompt)-n:], answer[:n]) {
			return n
		}
	}
	return 0
}

// mesh is a frontend wired to a fake scheduler and a fake shim on loopback.
type mesh struct {
	sched *fakeScheduler
	// scheds are every scheduler replica, sched the first.
	scheds []*fakeScheduler
	shim   *fakeShim
	svc    *Service
	url    string
	grpc   string
}

func newMesh(t *testing.T, mut func(*Config, *fakeShim)) *mesh {
	t.Helper()
	return newMeshOn(t, servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0"}, mut)
}

// newMeshOn is newMesh with the frontend's server options.
func newMeshOn(t *testing.T, opts servicekit.Options, mut func(*Config, *fakeShim)) *mesh {
	t.Helper()
	return newMeshReplicas(t, opts, 1, mut)
}

// newMeshReplicas is newMeshOn with schedulers scheduler replicas.
func newMeshReplicas(t *testing.T, opts servicekit.Options, schedulers int, mut func(*Config, *fakeShim)) *mesh {
	t.Helper()
	tok := tokenizer.Default()
	shim := &fakeShim{workerID: "worker-7", blockSize: 16, seen: map[uint64]bool{},
		answer: tok.EncodeOrdinary(" Hello there, agent. All good."), cancelled: make(chan struct{}), started: make(chan struct{})}
	cfg := DefaultConfig()
	// The model names the tests' bodies and SDK calls use.
	cfg.ModelAliases = []string{"m", "claude-x", "gpt-x"}
	if mut != nil {
		mut(&cfg, shim)
	}
	shimAddr := servicetest.Serve(t, shim.register)
	var scheds []*fakeScheduler
	var addrs []string
	finished := make(chan struct{}, 64) // whichever replica a turn finishes at (waitFinish)
	for range schedulers {
		sched := &fakeScheduler{workerID: shim.workerID, addr: shimAddr, finished: finished}
		scheds = append(scheds, sched)
		addrs = append(addrs, servicetest.Serve(t, func(s *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(s, sched) }))
	}
	cfg.SchedulerAddr = strings.Join(addrs, ",")

	run, svc := servicetest.Start(t, opts,
		func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	return &mesh{sched: scheds[0], scheds: scheds, shim: shim, svc: svc, url: "http://" + run.Server.HTTPAddr(), grpc: run.Server.GRPCAddr()}
}

// addShim starts another fake shim, worker id, which the scheduler routes
// to after the workers before it (when a request excludes those).
func (m *mesh) addShim(t *testing.T, id string, mut func(*fakeShim)) *fakeShim {
	t.Helper()
	shim := &fakeShim{workerID: id, blockSize: m.shim.blockSize, seen: map[uint64]bool{}, answer: m.shim.answer,
		cancelled: make(chan struct{}), started: make(chan struct{})}
	if mut != nil {
		mut(shim)
	}
	addr := servicetest.Serve(t, shim.register)
	m.addWorker(id, addr)
	return shim
}

// addWorker makes the scheduler route to a worker at addr after the others.
func (m *mesh) addWorker(id, addr string) {
	m.sched.mu.Lock()
	m.sched.others = append(m.sched.others, fakeTarget{id, addr})
	m.sched.mu.Unlock()
}

// toolMesh is a mesh whose engine calls the first tool a request declares
// when a user's message starts the turn (SimToolCalls).
func toolMesh(t *testing.T) *mesh {
	t.Helper()
	return newMesh(t, func(c *Config, _ *fakeShim) { c.SimToolCalls = true })
}

// chatInBackground sends turn1 with header pairs, for a worker that holds
// it (a stalled shim), and returns once the worker has it; leave makes the
// client go away and returns once its request has.
func (m *mesh) chatInBackground(t *testing.T, header ...string) (leave func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.url+"/v1/chat/completions", strings.NewReader(turn1))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	servicetest.Within(t, m.shim.started, "the background request never reached the worker")
	return func() {
		t.Helper()
		cancel()
		servicetest.Within(t, done, "the background request never returned")
	}
}

func (m *mesh) waitFinish(t *testing.T) {
	t.Helper()
	servicetest.Within(t, m.sched.finished, "FinishRequest")
}

// requests are the Generate requests the shim received, in order.
func (f *fakeShim) requests() []*enginev1.GenerateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// register serves the fake shim and, like a real one, grpc.health.v1: it
// answers SERVING, or with frozen set hangs until the caller gives up, as a
// stopped process does.
func (f *fakeShim) register(s *grpc.Server) {
	enginev1.RegisterEngineShimServiceServer(s, f)
	healthpb.RegisterHealthServer(s, &fakeHealth{frozen: func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.frozen
	}})
}

// fakeHealth answers SERVING, or while frozen says so hangs until the
// caller gives up, as a stopped process does.
type fakeHealth struct {
	healthpb.UnimplementedHealthServer
	frozen func() bool
}

func (h *fakeHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.frozen() {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}
