package kvhintemitter

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	"switchyard.dev/services/servicekit/servicetest"
)

func TestMain(m *testing.M) { servicetest.VerifyNoLeaks(m) }

// startEmitter runs the emitter with cfg on loopback until the test ends; on
// clk's time when clk is set.
func startEmitter(t *testing.T, cfg Config, clk *clock) (*servicetest.Running, *Service) {
	t.Helper()
	return servicetest.Start(t, servicekit.Options{Name: "kvhint-emitter", HTTPAddr: "127.0.0.1:0"}, func(srv *servicekit.Server) (*Service, error) {
		s, err := New(cfg, srv)
		if s != nil && clk != nil {
			s.now = clk.now
		}
		return s, err
	})
}

// watching waits until svc watches sched's programs and holds a connection
// to each of its n workers (hints to a worker not known yet fail and are
// retried, which would make the tests' totals inexact).
func watching(t *testing.T, sched *servicetest.FakeScheduler, svc *Service, n int) {
	t.Helper()
	servicetest.Eventually(t, "program watch", func() bool { return sched.ProgramWatches() > 0 })
	servicetest.Eventually(t, fmt.Sprintf("%d workers known", n), func() bool {
		svc.wmu.Lock()
		defer svc.wmu.Unlock()
		return len(svc.workers) == n
	})
}

// fakeIndexer serves fixed lineages.
type fakeIndexer struct {
	sessionindexv1.UnimplementedSessionPrefixIndexerServiceServer
	lineage map[string][]*sessionindexv1.Lineage
}

func (f *fakeIndexer) Register(g *grpc.Server) {
	sessionindexv1.RegisterSessionPrefixIndexerServiceServer(g, f)
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

func (f *fakeShim) Register(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, f) }

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
	idx := &fakeIndexer{lineage: map[string][]*sessionindexv1.Lineage{
		"s": {{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3}}},
		"p": {{WorkerId: "w0", BlockHashes: []uint64{1, 2, 5}}},
	}}
	sched := servicetest.NewFakeScheduler(
		&workerv1.Worker{WorkerId: "w0", Address: servicetest.Serve(t, w0.Register), Load: &workerv1.WorkerLoad{ActiveKvBlocks: 90, TotalKvBlocks: 100}},
		&workerv1.Worker{WorkerId: "w1", Address: servicetest.Serve(t, w1.Register)})
	sched.RewatchPrograms(program("p", "", "w0", reasoning, active, clk.now()))

	// The emitter starts before its peers (the mesh starts in any order).
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	cfg.Tick = 5 * time.Millisecond
	cfg.Backoff = servicekit.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}
	cfg.Hints.Disabled = nil // every policy, the long-tool demote included
	run, svc := startEmitter(t, cfg, clk)
	client := kvhintv1.NewKvHintEmitterServiceClient(run.Conn)

	servicetest.ServeAt(t, cfg.SessionIndexerAddr, idx.Register)
	servicetest.ServeAt(t, cfg.SchedulerAddr, sched.Register)
	watching(t, sched, svc, 2)
	if got := sched.ProgramWatchRequest().GetExceptReasons(); len(got) != 0 {
		t.Fatalf("every policy on: the watch excepts %v", got)
	}

	// A tool call on a busy worker lasts past the default threshold: demote
	// what only s holds (1-2 is p's prefix too, and p is live on w0).
	sched.ChangeProgram(program("s", "", "w0", acting, active, clk.now()), "acting")
	clk.add(hints.DefaultConfig().DefaultToolTime + time.Second)
	demote := &kvv1.KvHintAction{ActionType: "kv.demote@1", Payload: &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{
		SessionId: "s", Blocks: &kvv1.BlockSpan{BlockHashes: []uint64{3}}, ToTier: kvv1.Tier_TIER_HOST}}}
	servicetest.Eventually(t, "demote on w0", func() bool { return len(w0.actions()) == 1 })
	ignoreIDs := protocmp.IgnoreFields(&kvv1.KvHintAction{}, "action_id")
	if diff := cmp.Diff(demote, w0.actions()[0], protocmp.Transform(), ignoreIDs); diff != "" {
		t.Fatalf("demote (-want +got):\n%s", diff)
	}

	// The next turn starts: prefetch back.
	sched.SetProgram(program("s", "", "w0", reasoning, active, clk.now()))
	servicetest.Eventually(t, "prefetch on w0", func() bool { return len(w0.actions()) == 2 })
	if got := w0.actions()[1]; got.GetActionType() != "kv.prefetch@1" || got.GetPrefetch().GetToTier() != kvv1.Tier_TIER_DEVICE {
		t.Fatalf("want a prefetch, got %v", got)
	}

	// A sub-agent of p lands on w1: share p's chain from w0. w1 refuses.
	sched.SetProgram(program("c", "p", "w1", reasoning, active, clk.now()))
	servicetest.Eventually(t, "share on w1", func() bool { return len(w1.actions()) == 1 })
	share := &kvv1.KvHintAction{ActionType: "kv.share@1", Payload: &kvv1.KvHintAction_Share{Share: &kvv1.ShareHint{
		SessionId: "c", Blocks: &kvv1.BlockSpan{BlockHashes: []uint64{1, 2, 5}}, SourceWorkerId: "w0", SourceTier: kvv1.Tier_TIER_DEVICE}}}
	if diff := cmp.Diff(share, w1.actions()[0], protocmp.Transform(), ignoreIDs); diff != "" {
		t.Fatalf("share (-want +got):\n%s", diff)
	}

	// p finishes: release it where its lineage is.
	sched.SetProgram(program("p", "", "w0", reasoning, done, clk.now()))
	servicetest.Eventually(t, "release on w0", func() bool { return len(w0.actions()) == 3 })
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
	var (
		st  *kvhintv1.GetStatsResponse
		err error
	)
	servicetest.Eventually(t, "four hints counted", func() bool {
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
	body := servicetest.Get(t, "http://"+run.Server.HTTPAddr()+"/v1/policies")
	var js struct {
		Policies []struct{ Name string } `json:"policies"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil || len(js.Policies) != len(hints.PolicyNames()) {
		t.Fatalf("REST policies: %s (%v)", body, err)
	}
	m := servicetest.Get(t, "http://"+run.Server.HTTPAddr()+"/metrics")
	if !strings.Contains(m, `switchyard_kvhint_emitter_hints_total{action="share",outcome="rejected",policy="share_subagent_prefix"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
}

func TestRejectsUnknownPolicy(t *testing.T) {
	srv, err := servicekit.New(servicekit.Options{Name: "kvhint-emitter", Logger: servicetest.Discard})
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

// With no scheduler and no indexer the API still answers and shutdown is
// clean (goleak checks nothing is left behind).
func TestServesWithPeersDown(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	cfg.Backoff = servicekit.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}
	run, _ := startEmitter(t, cfg, nil)
	pol, err := kvhintv1.NewKvHintEmitterServiceClient(run.Conn).ListPolicies(context.Background(), &kvhintv1.ListPoliciesRequest{})
	if err != nil || len(pol.GetPolicies()) != len(hints.PolicyNames()) {
		t.Fatalf("policies: %v %v", pol, err)
	}
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestProgramWatchResyncs: after a reconnect the emitter rebuilds its
// program table from the scheduler's snapshot and forgets the programs the
// snapshot no longer holds.
func TestProgramWatchResyncs(t *testing.T) {
	sched := servicetest.NewFakeScheduler()
	sched.RewatchPrograms(program("a", "", "w0", reasoning, active, time.Now()))
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = servicetest.Serve(t, sched.Register), servicetest.Serve(t, (&fakeIndexer{}).Register)
	cfg.Tick = 5 * time.Millisecond
	cfg.Backoff = servicekit.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}
	_, svc := startEmitter(t, cfg, nil)
	programs := func() int { return svc.snapshot().stats.Programs }
	watching(t, sched, svc, 0)
	sched.SetProgram(program("b", "", "w0", acting, active, time.Now()))
	servicetest.Eventually(t, "a from the snapshot, b from the stream", func() bool { return programs() == 2 })
	// The scheduler dropped a and b (or restarted) while the stream was
	// down, and gained c: only c is left once the snapshot ends (it would
	// be 3 before the SYNCED marker).
	sched.RewatchPrograms(program("c", "", "w0", reasoning, active, time.Now()))
	servicetest.Eventually(t, "resynchronised to c", func() bool { return programs() == 1 })
}

// With several scheduler replicas, one replica's snapshot forgets only the
// programs last heard from it: another replica's stay.
func TestOneReplicasSnapshotKeepsTheOthersPrograms(t *testing.T) {
	s := &Service{sources: map[string]int{}, now: time.Now, log: servicetest.Discard}
	engine := hints.New(hints.DefaultConfig())
	acting := func(id string) hints.Program {
		return hints.Program{Session: id, Phase: hints.PhaseActing, Lifecycle: hints.LifecycleActive, Worker: "w1", PhaseSince: time.Now()}
	}
	s.observe(engine, programFeed{program: acting("a"), source: 0})
	s.observe(engine, programFeed{program: acting("b"), source: 1})
	s.observe(engine, programFeed{program: acting("c"), source: 0})
	// Replica 0 reconnects: its snapshot holds c only.
	s.observe(engine, programFeed{live: map[string]bool{"c": true}, source: 0})
	if n := engine.Resync(map[string]bool{"b": true, "c": true}); n != 0 {
		t.Fatalf("%d programs besides b and c are left, want none (a forgotten)", n)
	}
	if n := engine.Resync(map[string]bool{"c": true}); n != 1 {
		t.Fatalf("b (replica 1's) was forgotten by replica 0's snapshot: %d left besides c", n)
	}
}

// With the default policies (none follows a turn's phases) the emitter asks
// the scheduler to leave out reasoning and acting changes, and drops them
// itself when a scheduler sends them anyway: a sub-agent's turn starting
// away from its parent teaches it nothing, its placement there does (the
// share from the parent's worker).
func TestDefaultPoliciesWatchNoTurnPhases(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	w0, w1 := &fakeShim{answer: kvv1.HintResult_HINT_RESULT_ACCEPTED}, &fakeShim{answer: kvv1.HintResult_HINT_RESULT_ACCEPTED}
	idx := &fakeIndexer{lineage: map[string][]*sessionindexv1.Lineage{
		"p": {{WorkerId: "w0", BlockHashes: []uint64{1, 2, 5}}},
	}}
	sched := servicetest.NewFakeScheduler(
		&workerv1.Worker{WorkerId: "w0", Address: servicetest.Serve(t, w0.Register)},
		&workerv1.Worker{WorkerId: "w1", Address: servicetest.Serve(t, w1.Register)})
	sched.RewatchPrograms(program("p", "", "w0", reasoning, active, clk.now()))
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = servicetest.Serve(t, sched.Register), servicetest.Serve(t, idx.Register)
	cfg.Tick = 5 * time.Millisecond
	cfg.Backoff = servicekit.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}
	_, svc := startEmitter(t, cfg, clk)
	watching(t, sched, svc, 2)
	if got := sched.ProgramWatchRequest().GetExceptReasons(); !slices.Equal(got, []string{"reasoning", "acting"}) {
		t.Fatalf("watch excepts %v, want reasoning and acting", got)
	}

	sched.ChangeProgram(program("c", "p", "w1", reasoning, active, clk.now()), "reasoning")
	time.Sleep(10 * cfg.Tick) // rounds enough for a share, had the change counted
	if n := len(w1.actions()); n != 0 {
		t.Fatalf("%d hints on w1 from a dropped reasoning change", n)
	}
	sched.ChangeProgram(program("c", "p", "w1", reasoning, active, clk.now()), "placed")
	servicetest.Eventually(t, "share on w1", func() bool { return len(w1.actions()) == 1 })
	if got := w1.actions()[0]; got.GetShare().GetSourceWorkerId() != "w0" {
		t.Fatalf("want a share from w0, got %v", got)
	}
}

// A scheduler not heard from for ForgetAfter has its programs forgotten:
// with the defaults an active program's turns are not watched, so its
// silence alone does not end it, and a replica gone for good would
// otherwise leave its programs in the engine for ever.
func TestForgetsTheProgramsOfASchedulerGoneForGood(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	sched := servicetest.NewFakeScheduler()
	sched.RewatchPrograms(program("a", "", "w0", reasoning, active, clk.now()))
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	cfg.Tick = 5 * time.Millisecond
	cfg.Backoff = servicekit.Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	_, stop := servicetest.ServeAt(t, cfg.SchedulerAddr, sched.Register)
	_, svc := startEmitter(t, cfg, clk)
	servicetest.Eventually(t, "a tracked", func() bool { return svc.snapshot().stats.Programs == 1 })

	stop()
	clk.add(time.Minute)
	time.Sleep(20 * cfg.Tick) // rounds and failed watches, well inside ForgetAfter
	if n := svc.snapshot().stats.Programs; n != 1 {
		t.Fatalf("%d programs a minute after the scheduler went, want a kept", n)
	}
	servicetest.Eventually(t, "a forgotten", func() bool {
		clk.add(10 * time.Minute)
		return svc.snapshot().stats.Programs == 0
	})
}
