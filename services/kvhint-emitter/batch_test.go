package kvhintemitter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	kvhintv1 "switchyard.dev/gen/switchyard/kvhint/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/kvwire"
	"switchyard.dev/services/servicekit/servicetest"
)

// batchIndexer answers GetSessionLineages, with shared counts, and counts
// the reads of each kind.
type batchIndexer struct {
	sessionindexv1.UnimplementedSessionPrefixIndexerServiceServer
	lineage map[string][]*sessionindexv1.Lineage

	// most, when set, is the most queries whose answer fits a message:
	// more are RESOURCE_EXHAUSTED, as an answer over the size limit is.
	most int

	mu              sync.Mutex
	batches, single int
	biggest         int // most queries in one call answered
}

func (f *batchIndexer) GetSessionLineages(_ context.Context, req *sessionindexv1.GetSessionLineagesRequest) (*sessionindexv1.GetSessionLineagesResponse, error) {
	if f.most > 0 && len(req.GetQueries()) > f.most {
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max")
	}
	f.mu.Lock()
	f.batches++
	f.biggest = max(f.biggest, len(req.GetQueries()))
	f.mu.Unlock()
	resp := &sessionindexv1.GetSessionLineagesResponse{}
	for _, q := range req.GetQueries() {
		r := &sessionindexv1.SessionLineage{SessionId: q.GetSessionId()}
		ls, ok := f.lineage[q.GetSessionId()]
		r.Found = ok
		for _, l := range ls {
			if q.GetWorkerId() == "" || q.GetWorkerId() == l.GetWorkerId() {
				r.Lineages = append(r.Lineages, l)
			}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (f *batchIndexer) GetSessionLineage(context.Context, *sessionindexv1.GetSessionLineageRequest) (*sessionindexv1.GetSessionLineageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.single++
	return &sessionindexv1.GetSessionLineageResponse{}, nil
}

func (f *batchIndexer) Register(g *grpc.Server) {
	sessionindexv1.RegisterSessionPrefixIndexerServiceServer(g, f)
}

func (f *batchIndexer) reads() (batches, single int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches, f.single
}

// Against an indexer that answers batched reads, the emitter reads lineage
// once per round and trusts its shared counts; and each worker is sent what
// its engine announced it acts on: the simulated engine a demote, SGLang a
// retain in its place, a vLLM release build nothing.
func TestSendsWhatEachEngineActsOn(t *testing.T) {
	shims := map[string]*fakeShim{}
	support := map[string]*kvv1.HintSupport{
		"sim": {Capabilities: []*kvv1.HintCapability{{ActionType: "kv.share@1"}, {ActionType: "kv.prefetch@1"}, {ActionType: "kv.demote@1"}, {ActionType: "kv.release_session@1"}}},
		"sglang": {Capabilities: []*kvv1.HintCapability{{ActionType: "kv.retain@1", MaxPriority: 99, NextRequests: true},
			{ActionType: "kv.release_session@1", NextRequests: true}}},
		"vllm": {},
	}
	var workers []*workerv1.Worker
	for _, id := range []string{"sim", "sglang", "vllm"} {
		sh := &fakeShim{answer: kvv1.HintResult_HINT_RESULT_ACCEPTED}
		shims[id] = sh
		workers = append(workers, &workerv1.Worker{WorkerId: id, Address: servicetest.Serve(t, sh.Register), HintSupport: support[id]})
	}
	idx := &batchIndexer{lineage: map[string][]*sessionindexv1.Lineage{
		// 1-2 is shared (the indexer says so); only s reaches 3.
		"s": {{WorkerId: "sim", BlockHashes: []uint64{1, 2, 3}, SharedBlocks: 2}},
		"r": {{WorkerId: "sglang", BlockHashes: []uint64{4, 5}}},
		"q": {{WorkerId: "vllm", BlockHashes: []uint64{6}}},
	}}
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	sched := servicetest.NewFakeScheduler(workers...)

	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = servicetest.Serve(t, sched.Register), servicetest.Serve(t, idx.Register)
	cfg.Tick = 5 * time.Millisecond
	cfg.Hints.Disabled = nil // the long-tool demote included
	cfg.Hints.DemoteMinKVUsage = 0
	run, svc := startEmitter(t, cfg, clk)
	watching(t, sched, svc, 3)
	for _, p := range []struct{ s, w string }{{"s", "sim"}, {"r", "sglang"}, {"q", "vllm"}} {
		sched.SetProgram(program(p.s, "", p.w, acting, active, clk.now()))
	}
	servicetest.Eventually(t, "programs observed", func() bool { return svc.snapshot().stats.Programs == 3 })
	clk.add(hints.DefaultConfig().DefaultToolTime + time.Second)

	ignoreIDs := protocmp.IgnoreFields(&kvv1.KvHintAction{}, "action_id")
	servicetest.Eventually(t, "demote to the simulated engine", func() bool { return len(shims["sim"].actions()) == 1 })
	want := &kvv1.KvHintAction{ActionType: "kv.demote@1", Payload: &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{
		SessionId: "s", Blocks: &kvv1.BlockSpan{BlockHashes: []uint64{3}}, ToTier: kvv1.Tier_TIER_HOST}}}
	if diff := cmp.Diff(want, shims["sim"].actions()[0], protocmp.Transform(), ignoreIDs); diff != "" {
		t.Fatalf("demote (-want +got):\n%s", diff)
	}
	servicetest.Eventually(t, "retain to SGLang", func() bool { return len(shims["sglang"].actions()) == 1 })
	d := hints.DefaultConfig()
	want = &kvv1.KvHintAction{ActionType: "kv.retain@1", Payload: &kvv1.KvHintAction_Retain{Retain: &kvv1.RetainHint{
		SessionId: "r", Blocks: &kvv1.BlockSpan{}, Priority: int32(d.RetainPriority), TtlSeconds: uint32(d.RetainTTL / time.Second)}}}
	if diff := cmp.Diff(want, shims["sglang"].actions()[0], protocmp.Transform(), ignoreIDs); diff != "" {
		t.Fatalf("retain (-want +got):\n%s", diff)
	}
	servicetest.Eventually(t, "q's demote counted unsupported", func() bool { return svc.snapshot().totals.Unsupported == 1 })
	if n := len(shims["vllm"].actions()); n != 0 {
		t.Fatalf("vLLM release build sent %d hints", n)
	}
	batches, single := idx.reads()
	if batches == 0 || single != 0 || idx.biggest != 3 {
		t.Fatalf("lineage reads: %d batched (largest %d queries), %d single; want batched only, the three in one", batches, idx.biggest, single)
	}

	st, err := kvhintv1.NewKvHintEmitterServiceClient(run.Conn).GetStats(context.Background(), &kvhintv1.GetStatsRequest{})
	if err != nil || st.GetUnsupported() != 1 || st.GetSent() != 2 {
		t.Fatalf("stats %v %v", st, err)
	}
}

func TestSupportFromProto(t *testing.T) {
	if s := kvwire.HintSupport(nil); s.Known {
		t.Fatal("no announcement read as known")
	}
	got := kvwire.HintSupport(&kvv1.HintSupport{Capabilities: []*kvv1.HintCapability{
		{ActionType: "kv.retain@1", MaxPriority: 99, MaxTtlSeconds: 60, NextRequests: true},
		{ActionType: "kv.pin@1"}, // no policy sends it
		{ActionType: "kv.demote@7"},
	}})
	want := hints.Support{Known: true, Caps: []hints.Capability{{Kind: hints.KindRetain, MaxPriority: 99, MaxTTL: time.Minute, NextRequests: true}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// A retain's lease is whole seconds, rounded up.
	a := actionToProto("m/0", hints.Action{Kind: hints.KindRetain, Session: "s", Blocks: []kv.BlockHash{1}, TTL: 1500 * time.Millisecond, Priority: 50})
	if a.GetRetain().GetTtlSeconds() != 2 || a.GetActionType() != "kv.retain@1" {
		t.Fatalf("retain %v", a)
	}
}

// TestLineageBatchHalvesPastTheMessageLimit: a batched read whose answer
// would outgrow a message (RESOURCE_EXHAUSTED) is asked again in halves, so
// a round with long lineages still decides instead of failing every time.
func TestLineageBatchHalvesPastTheMessageLimit(t *testing.T) {
	idx := &flipIndexer{batchIndexer: &batchIndexer{most: 1, lineage: map[string][]*sessionindexv1.Lineage{
		"s": {{WorkerId: "sim", BlockHashes: []uint64{1, 2}}},
		"r": {{WorkerId: "sim", BlockHashes: []uint64{3, 4}}},
		"q": {{WorkerId: "sim", BlockHashes: []uint64{5, 6}}},
	}}}
	// big's lineage alone outgrows a message: it gets no hint, the others do.
	idx.hugeOn.Store(true)
	sh, _ := actingOnOneWorker(t, idx, "s", "r", "q", "big")
	servicetest.Eventually(t, "a demote for each session", func() bool { return len(sh.actions()) == 3 })
	if batches, single := idx.reads(); idx.biggest != 1 || single != 0 || batches < 3 {
		t.Fatalf("lineage reads: %d batched (largest %d), %d single; want batches of one", batches, idx.biggest, single)
	}
}

// actingOnOneWorker starts an emitter over one simulated worker, "sim",
// and the lineage indexer idx, with each session's program acting on it
// past its tool time: each is due a demote. The clock moves on no further.
func actingOnOneWorker(t *testing.T, idx interface{ Register(*grpc.Server) }, sessions ...string) (*fakeShim, *Service) {
	t.Helper()
	sh := &fakeShim{answer: kvv1.HintResult_HINT_RESULT_ACCEPTED}
	support := &kvv1.HintSupport{Capabilities: []*kvv1.HintCapability{{ActionType: "kv.demote@1"}, {ActionType: "kv.release_session@1"}}}
	w := &workerv1.Worker{WorkerId: "sim", Address: servicetest.Serve(t, sh.Register), HintSupport: support}
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	sched := servicetest.NewFakeScheduler(w)
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr = servicetest.Serve(t, sched.Register), servicetest.Serve(t, idx.Register)
	cfg.Tick = 5 * time.Millisecond
	cfg.Hints.Disabled = nil
	cfg.Hints.DemoteMinKVUsage = 0
	_, svc := startEmitter(t, cfg, clk)
	watching(t, sched, svc, 1)
	for _, s := range sessions {
		sched.SetProgram(program(s, "", "sim", acting, active, clk.now()))
	}
	servicetest.Eventually(t, "programs observed", func() bool { return svc.snapshot().stats.Programs == len(sessions) })
	clk.add(hints.DefaultConfig().DefaultToolTime + time.Second)
	return sh, svc
}

// flipIndexer refuses, while hugeOn, any batch asking for session "big", as
// an answer over the message limit is refused.
type flipIndexer struct {
	*batchIndexer
	hugeOn atomic.Bool
}

func (f *flipIndexer) GetSessionLineages(ctx context.Context, req *sessionindexv1.GetSessionLineagesRequest) (*sessionindexv1.GetSessionLineagesResponse, error) {
	if f.hugeOn.Load() {
		for _, q := range req.GetQueries() {
			if q.GetSessionId() == "big" {
				return nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max")
			}
		}
	}
	return f.batchIndexer.GetSessionLineages(ctx, req)
}

func (f *flipIndexer) Register(g *grpc.Server) {
	sessionindexv1.RegisterSessionPrefixIndexerServiceServer(g, f)
}

// TestOversizedLineageIsUnknownForTheRoundOnly: a session whose lineage
// could not be read is decided again once it can be, not taken as having
// nothing to demote.
func TestOversizedLineageIsUnknownForTheRoundOnly(t *testing.T) {
	idx := &flipIndexer{batchIndexer: &batchIndexer{lineage: map[string][]*sessionindexv1.Lineage{
		"s":   {{WorkerId: "sim", BlockHashes: []uint64{1, 2}}},
		"big": {{WorkerId: "sim", BlockHashes: []uint64{7, 8}}},
	}}}
	idx.hugeOn.Store(true)
	sh, svc := actingOnOneWorker(t, idx, "s", "big")
	servicetest.Eventually(t, "a demote for s, big's lineage unread", func() bool {
		return len(sh.actions()) == 1 && svc.snapshot().stats.LineageFails > 0
	})
	idx.hugeOn.Store(false)
	servicetest.Eventually(t, "big decided once its lineage is read", func() bool { return len(sh.actions()) == 2 })
}
