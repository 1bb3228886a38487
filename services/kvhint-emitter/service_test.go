package kvhintemitter

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	kvhintv1 "switchyard.dev/gen/switchyard/kvhint/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/services/servicekit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

func serve(t *testing.T, addr string, register func(*grpc.Server)) string {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeScheduler: a fixed worker set, a program table and a program stream
// the test pushes to.
type fakeScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	workers  []*workerv1.Worker
	mu       sync.Mutex
	table    []*schedulerv1.Program
	watchers []chan *schedulerv1.Program
	kicked   chan struct{} // closed by kick
}

func (f *fakeScheduler) WatchWorkers(_ *schedulerv1.WatchWorkersRequest, st grpc.ServerStreamingServer[schedulerv1.WatchWorkersResponse]) error {
	for _, w := range f.workers {
		if err := st.Send(&schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, Worker: w}); err != nil {
			return err
		}
	}
	if err := st.Send(&schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED}); err != nil {
		return err
	}
	<-st.Context().Done()
	return nil
}

// WatchPrograms follows the scheduler's contract: the table as EXISTING
// events, SYNCED, then what the test pushes (which also enters the table).
// kick ends every open stream.
func (f *fakeScheduler) WatchPrograms(_ *schedulerv1.WatchProgramsRequest, st grpc.ServerStreamingServer[schedulerv1.WatchProgramsResponse]) error {
	c := make(chan *schedulerv1.Program, 16)
	f.mu.Lock()
	table := append([]*schedulerv1.Program(nil), f.table...)
	f.watchers = append(f.watchers, c)
	if f.kicked == nil {
		f.kicked = make(chan struct{})
	}
	kicked := f.kicked
	f.mu.Unlock()
	for _, p := range table {
		if err := st.Send(&schedulerv1.WatchProgramsResponse{Program: p, Reason: "snapshot", Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING}); err != nil {
			return err
		}
	}
	if err := st.Send(&schedulerv1.WatchProgramsResponse{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED}); err != nil {
		return err
	}
	for {
		select {
		case <-st.Context().Done():
			return nil
		case <-kicked:
			return status.Error(codes.Unavailable, "kicked")
		case p := <-c:
			if err := st.Send(&schedulerv1.WatchProgramsResponse{Program: p, Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_CHANGED}); err != nil {
				return err
			}
		}
	}
}

// kick ends the open program streams with table as the scheduler's new
// table; the emitter watches again.
func (f *fakeScheduler) kick(table ...*schedulerv1.Program) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kicked != nil {
		close(f.kicked)
	}
	f.kicked = nil
	f.table, f.watchers = table, nil
}

func (f *fakeScheduler) push(p *schedulerv1.Program) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = append(f.table, p)
	for _, c := range f.watchers {
		c <- p
	}
}

func (f *fakeScheduler) watching() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers) > 0
}

// fakeIndexer serves fixed lineages.
type fakeIndexer struct {
	sessionindexv1.UnimplementedSessionPrefixIndexerServiceServer
	lineage map[string][]*sessionindexv1.Lineage
}

func (f *fakeIndexer) GetSessionLineage(_ context.Context, req *sessionindexv1.GetSessionLineageRequest) (*sessionindexv1.GetSessionLineageResponse, error) {
	ls, ok := f.lineage[req.GetSessionId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "unknown session")
	}
	resp := &sessionindexv1.GetSessionLineageResponse{SessionId: req.GetSessionId()}
	for _, l := range ls {
		if req.GetWorkerId() == "" || req.GetWorkerId() == l.GetWorkerId() {
			resp.Lineages = append(resp.Lineages, l)
		}
	}
	return resp, nil
}

// fakeShim records envelopes and answers every action with one result. Its
// KV state is a fixed snapshot and its event stream stays quiet.
type fakeShim struct {
	enginev1.UnimplementedEngineShimServiceServer
	answer   kvv1.HintResult
	snapshot []*kvv1.KvEvent
	mu       sync.Mutex
	got      []*kvv1.KvHintEnvelope
}

func (f *fakeShim) GetKvSnapshot(context.Context, *enginev1.GetKvSnapshotRequest) (*enginev1.GetKvSnapshotResponse, error) {
	return &enginev1.GetKvSnapshotResponse{Epoch: 1, Sequence: 1, Events: f.snapshot}, nil
}

func (f *fakeShim) SubscribeKvEvents(_ *enginev1.SubscribeKvEventsRequest, st grpc.ServerStreamingServer[enginev1.SubscribeKvEventsResponse]) error {
	<-st.Context().Done()
	return nil
}

func (f *fakeShim) ApplyKvHints(_ context.Context, req *enginev1.ApplyKvHintsRequest) (*enginev1.ApplyKvHintsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	env := req.GetEnvelope()
	f.got = append(f.got, env)
	resp := &enginev1.ApplyKvHintsResponse{MessageId: env.GetMessageId()}
	for _, a := range env.GetActions() {
		resp.Outcomes = append(resp.Outcomes, &kvv1.KvHintOutcome{ActionId: a.GetActionId(), Result: f.answer})
	}
	return resp, nil
}

// actions returns every action received so far.
func (f *fakeShim) actions() []*kvv1.KvHintAction {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*kvv1.KvHintAction
	for _, e := range f.got {
		out = append(out, e.GetActions()...)
	}
	return out
}

// clock is a fake clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func program(s, parent, w string, ph schedulerv1.ProgramPhase, lc schedulerv1.ProgramLifecycle, since time.Time) *schedulerv1.Program {
	return &schedulerv1.Program{SessionId: s, ParentSessionId: parent, WorkerId: w, Phase: ph, Lifecycle: lc, PhaseSince: timestamppb.New(since)}
}

const (
	acting    = schedulerv1.ProgramPhase_PROGRAM_PHASE_ACTING
	reasoning = schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING
	active    = schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_ACTIVE
	done      = schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_TERMINATED
)

func TestEmitsHintsFromLifecycle(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	w0, w1 := &fakeShim{answer: kvv1.HintResult_HINT_RESULT_ACCEPTED}, &fakeShim{answer: kvv1.HintResult_HINT_RESULT_REJECTED}
	a0 := serve(t, "", func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, w0) })
	a1 := serve(t, "", func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, w1) })
	idx := &fakeIndexer{lineage: map[string][]*sessionindexv1.Lineage{
		"s": {{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3}}},
		"p": {{WorkerId: "w0", BlockHashes: []uint64{1, 2, 5}}},
	}}
	sched := &fakeScheduler{
		workers: []*workerv1.Worker{
			{WorkerId: "w0", Address: a0, Load: &workerv1.WorkerLoad{ActiveKvBlocks: 90, TotalKvBlocks: 100}},
			{WorkerId: "w1", Address: a1},
		},
		table: []*schedulerv1.Program{program("p", "", "w0", reasoning, active, clk.now())},
	}

	// The emitter starts before its peers (the mesh starts in any order).
	var reserve [2]string
	for i := range reserve {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		reserve[i] = l.Addr().String()
		l.Close()
	}
	srv, err := servicekit.New(servicekit.Options{Name: "kvhint-emitter", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = reserve[0], reserve[1]
	cfg.Tick = 5 * time.Millisecond
	cfg.BackoffMin, cfg.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	cfg.Hints.Disabled = nil // every policy, the long-tool demote included
	svc, err := New(cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	svc.now = clk.now
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- servicekit.Run(ctx, srv, svc.Run) }()
	conn, err := servicekit.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	client := kvhintv1.NewKvHintEmitterServiceClient(conn)

	serve(t, reserve[1], func(g *grpc.Server) { sessionindexv1.RegisterSessionPrefixIndexerServiceServer(g, idx) })
	serve(t, reserve[0], func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	eventually(t, "program watch", sched.watching)
	// Hints to a worker not known yet fail and are retried; wait for both so
	// the totals below are exact.
	eventually(t, "workers known", func() bool {
		svc.wmu.Lock()
		defer svc.wmu.Unlock()
		return len(svc.workers) == 2
	})

	// A tool call on a busy worker lasts past the default threshold: demote
	// what only s holds (1-2 is p's prefix too, and p is live on w0).
	sched.push(program("s", "", "w0", acting, active, clk.now()))
	clk.add(hints.DefaultConfig().DefaultToolTime + time.Second)
	demote := &kvv1.KvHintAction{ActionType: "kv.demote@1", Payload: &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{
		SessionId: "s", Blocks: &kvv1.BlockSpan{BlockHashes: []uint64{3}}, ToTier: kvv1.Tier_TIER_HOST}}}
	eventually(t, "demote on w0", func() bool { return len(w0.actions()) == 1 })
	ignoreIDs := protocmp.IgnoreFields(&kvv1.KvHintAction{}, "action_id")
	if diff := cmp.Diff(demote, w0.actions()[0], protocmp.Transform(), ignoreIDs); diff != "" {
		t.Fatalf("demote (-want +got):\n%s", diff)
	}

	// The next turn starts: prefetch back.
	sched.push(program("s", "", "w0", reasoning, active, clk.now()))
	eventually(t, "prefetch on w0", func() bool { return len(w0.actions()) == 2 })
	if got := w0.actions()[1]; got.GetActionType() != "kv.prefetch@1" || got.GetPrefetch().GetToTier() != kvv1.Tier_TIER_DEVICE {
		t.Fatalf("want a prefetch, got %v", got)
	}

	// A sub-agent of p lands on w1: share p's chain from w0. w1 refuses.
	sched.push(program("c", "p", "w1", reasoning, active, clk.now()))
	eventually(t, "share on w1", func() bool { return len(w1.actions()) == 1 })
	share := &kvv1.KvHintAction{ActionType: "kv.share@1", Payload: &kvv1.KvHintAction_Share{Share: &kvv1.ShareHint{
		SessionId: "c", Blocks: &kvv1.BlockSpan{BlockHashes: []uint64{1, 2, 5}}, SourceWorkerId: "w0", SourceTier: kvv1.Tier_TIER_DEVICE}}}
	if diff := cmp.Diff(share, w1.actions()[0], protocmp.Transform(), ignoreIDs); diff != "" {
		t.Fatalf("share (-want +got):\n%s", diff)
	}

	// p finishes: release it where its lineage is.
	sched.push(program("p", "", "w0", reasoning, done, clk.now()))
	eventually(t, "release on w0", func() bool { return len(w0.actions()) == 3 })
	if got := w0.actions()[2].GetReleaseSession().GetSessionId(); got != "p" {
		t.Fatalf("release %q", got)
	}

	// Envelopes: protocol 0.1, unique message ids, unique action ids.
	ids := map[string]bool{}
	for _, sh := range []*fakeShim{w0, w1} {
		sh.mu.Lock()
		for _, e := range sh.got {
			if e.GetProtocolVersion() != "0.1" || ids[e.GetMessageId()] {
				t.Errorf("envelope %v", e)
			}
			ids[e.GetMessageId()] = true
			for _, a := range e.GetActions() {
				if ids[a.GetActionId()] || !strings.HasPrefix(a.GetActionId(), e.GetMessageId()) {
					t.Errorf("action id %q", a.GetActionId())
				}
				ids[a.GetActionId()] = true
			}
		}
		sh.mu.Unlock()
	}

	// A shim has the action before the emitter has its answer: wait for
	// the last one to be counted.
	var st *kvhintv1.GetStatsResponse
	eventually(t, "four hints counted", func() bool {
		st, err = client.GetStats(context.Background(), &kvhintv1.GetStatsRequest{})
		return err == nil && st.GetSent() == 4
	})
	if diff := cmp.Diff(&kvhintv1.GetStatsResponse{Sent: 4, Accepted: 3, Rejected: 1}, st, protocmp.Transform()); diff != "" {
		t.Fatalf("stats (-want +got):\n%s", diff)
	}
	recent, err := client.ListRecentHints(context.Background(), &kvhintv1.ListRecentHintsRequest{Limit: 2})
	if err != nil || len(recent.GetHints()) != 2 || recent.GetHints()[0].GetPolicy() != hints.PolicyReleaseFinished ||
		recent.GetHints()[1].GetOutcome().GetResult() != kvv1.HintResult_HINT_RESULT_REJECTED {
		t.Fatalf("recent %v %v", recent, err)
	}
	pol, err := client.ListPolicies(context.Background(), &kvhintv1.ListPoliciesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]uint64{}
	for _, p := range pol.GetPolicies() {
		sent[p.GetName()] = p.GetHintsSent()
	}
	want := map[string]uint64{hints.PolicyReleaseFinished: 1, hints.PolicyDemoteLongTool: 1, hints.PolicyDemotePaused: 0, hints.PolicyPrefetchResume: 1, hints.PolicyShareSubagent: 1}
	if diff := cmp.Diff(want, sent); diff != "" {
		t.Fatalf("policies (-want +got):\n%s", diff)
	}

	// REST and metrics.
	body := httpGet(t, "http://"+srv.HTTPAddr()+"/v1/policies")
	var js struct {
		Policies []struct{ Name string } `json:"policies"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil || len(js.Policies) != len(hints.PolicyNames()) {
		t.Fatalf("REST policies: %s (%v)", body, err)
	}
	m := httpGet(t, "http://"+srv.HTTPAddr()+"/metrics")
	if !strings.Contains(m, `switchyard_kvhint_emitter_hints_total{action="share",outcome="rejected",policy="share_subagent_prefix"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
}

func TestRejectsUnknownPolicy(t *testing.T) {
	srv, err := servicekit.New(servicekit.Options{Name: "kvhint-emitter", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Hints.Disabled = []string{"nope"}
	if _, err := New(cfg, srv); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// With no scheduler and no indexer the API still answers and shutdown is
// clean (goleak checks nothing is left behind).
func TestServesWithPeersDown(t *testing.T) {
	srv, err := servicekit.New(servicekit.Options{Name: "kvhint-emitter", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	for _, a := range []*string{&cfg.SchedulerAddr, &cfg.SessionIndexerAddr} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		*a = l.Addr().String()
		l.Close()
	}
	cfg.BackoffMin, cfg.BackoffMax = time.Millisecond, 10*time.Millisecond
	svc, err := New(cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- servicekit.Run(ctx, srv, svc.Run) }()
	conn, err := servicekit.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pol, err := kvhintv1.NewKvHintEmitterServiceClient(conn).ListPolicies(context.Background(), &kvhintv1.ListPoliciesRequest{})
	if err != nil || len(pol.GetPolicies()) != len(hints.PolicyNames()) {
		t.Fatalf("policies: %v %v", pol, err)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
}

// TestProgramWatchResyncs: after a reconnect the emitter rebuilds its
// program table from the scheduler's snapshot and forgets the programs the
// snapshot no longer holds.
func TestProgramWatchResyncs(t *testing.T) {
	sched := &fakeScheduler{
		table: []*schedulerv1.Program{program("a", "", "w0", reasoning, active, time.Now())}}
	schedAddr := serve(t, "", func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	idxAddr := serve(t, "", func(g *grpc.Server) {
		sessionindexv1.RegisterSessionPrefixIndexerServiceServer(g, &fakeIndexer{})
	})
	srv, err := servicekit.New(servicekit.Options{Name: "kvhint-emitter", GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = schedAddr, idxAddr
	cfg.Tick = 5 * time.Millisecond
	cfg.BackoffMin, cfg.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	svc, err := New(cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- servicekit.Run(ctx, srv, svc.Run) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	programs := func() int { return svc.snapshot().stats.Programs }
	eventually(t, "program watch", sched.watching)
	sched.push(program("b", "", "w0", acting, active, time.Now()))
	eventually(t, "a from the snapshot, b from the stream", func() bool { return programs() == 2 })
	// The scheduler dropped a and b (or restarted) while the stream was
	// down, and gained c: only c is left once the snapshot ends (it would
	// be 3 before the SYNCED marker).
	sched.kick(program("c", "", "w0", reasoning, active, time.Now()))
	eventually(t, "resynchronised to c", func() bool { return programs() == 1 })
}
