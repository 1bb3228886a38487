package engineshim

import (
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/tokenizer"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestMain(m *testing.M) {
	// zmq4 v0.17.0 never stops a PUB socket's writer goroutine; only the
	// protocol fake (realengine_test.go) has PUB sockets.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

type harness struct {
	svc    *Service
	srv    *servicekit.Server
	client enginev1.EngineShimServiceClient
}

// start runs a shim on loopback until the test ends.
func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	run, svc := startShim(t, servicekit.Options{Name: "engine-shim", HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second}, cfg)
	return &harness{svc: svc, srv: run.Server, client: enginev1.NewEngineShimServiceClient(run.Conn)}
}

func startShim(t *testing.T, opts servicekit.Options, cfg Config) (*servicetest.Running, *Service) {
	t.Helper()
	return servicetest.Start(t, opts, func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.WorkerID = "w-test"
	cfg.NumGPUBlocks = 256
	cfg.SpeedUp = 1000 // tests wait microseconds, not the modelled milliseconds
	return cfg
}

type generated struct {
	tokens []uint32
	deltas int
	result *enginev1.GenerateResult
}

func generate(t *testing.T, c enginev1.EngineShimServiceClient, req *enginev1.GenerateRequest) generated {
	t.Helper()
	stream, err := c.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var g generated
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		switch k := resp.GetKind().(type) {
		case *enginev1.GenerateResponse_Delta:
			if g.result != nil {
				t.Fatal("delta after the result")
			}
			g.deltas++
			g.tokens = append(g.tokens, k.Delta.GetTokenIds()...)
		case *enginev1.GenerateResponse_Result:
			g.result = k.Result
		}
	}
	if g.result == nil {
		t.Fatal("stream ended without a result")
	}
	return g
}

func seq(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

func TestGenerateSecondTurnIsCached(t *testing.T) {
	h := start(t, testConfig())
	agent := &agentv1.AgentContext{SessionId: "sess-1"}
	prompt := seq(10, 100)
	g1 := generate(t, h.client, &enginev1.GenerateRequest{
		RequestId: "turn-1", Agent: agent, TokenIds: prompt,
		BlockHashes: uint64sOf(kvhash.New(16, "", "").Blocks(prompt)),
		Sampling:    &enginev1.SamplingParams{MaxTokens: 12, IgnoreEos: true},
	})
	u := g1.result.GetUsage()
	if len(g1.tokens) != 12 || u.GetCompletionTokens() != 12 || u.GetPromptTokens() != 100 || u.GetCachedTokens() != 0 {
		t.Fatalf("turn 1: %d tokens, usage %v", len(g1.tokens), u)
	}
	if g1.result.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_LENGTH || g1.result.GetWorkerId() != "w-test" {
		t.Fatalf("turn 1 result %v", g1.result)
	}
	vocab := defaultVocab()
	for _, tok := range g1.tokens {
		if !slices.Contains(vocab, tok) {
			t.Fatalf("token %d is not from the word vocabulary", tok)
		}
	}
	// Turn 2 extends turn 1's prompt and answer, and ends in a tool call.
	prompt2 := append(append(slices.Clone(prompt), g1.tokens...), seq(900, 40)...)
	g2 := generate(t, h.client, &enginev1.GenerateRequest{
		RequestId: "turn-2", Agent: agent, TokenIds: prompt2,
		Sampling:         &enginev1.SamplingParams{MaxTokens: 50},
		ToolCallTokenIds: []uint32{7, 8, 9},
	})
	if got := g2.result.GetUsage().GetCachedTokens(); got != 96 {
		t.Fatalf("turn 2 cached %d tokens, want 96 (the 111 computed tokens of turn 1 fill 6 blocks)", got)
	}
	if g2.result.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_TOOL_CALLS || !slices.Equal(g2.tokens[len(g2.tokens)-3:], []uint32{7, 8, 9}) {
		t.Fatalf("turn 2 ends %v with %v", g2.tokens, g2.result.GetFinishReason())
	}
	if g2.result.GetTiming().GetTotalMs() <= 0 {
		t.Fatalf("timing %v", g2.result.GetTiming())
	}
}

// A request's stop sequence ends it where the simulated output first holds
// it, as vLLM and SGLang end a request at a stop string: finish "stop", its
// usage counting the tokens up to the one that completed it, the engine's
// blocks freed. The same request without it generates on to max_tokens.
func TestGenerateEndsAtAStopSequence(t *testing.T) {
	h := start(t, testConfig())
	tok := tokenizer.Default()
	prompt := seq(10, 100)
	whole := generate(t, h.client, &enginev1.GenerateRequest{RequestId: "whole", TokenIds: prompt,
		Sampling: &enginev1.SamplingParams{MaxTokens: 200, IgnoreEos: true, Seed: 3}})
	// The stop: the second word of the answer, whose first token holds it.
	word := tok.Decode(whole.tokens[1:2])
	want := 2
	if strings.Contains(tok.Decode(whole.tokens[:1]), word) {
		want = 1 // the first word holds the second
	}
	g := generate(t, h.client, &enginev1.GenerateRequest{RequestId: "stopped", TokenIds: prompt,
		Sampling: &enginev1.SamplingParams{MaxTokens: 200, IgnoreEos: true, Seed: 3, Stop: []string{"never in the text", word}}})
	if g.result.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_STOP {
		t.Errorf("finish %v, want stop", g.result.GetFinishReason())
	}
	if len(g.tokens) != want || g.result.GetUsage().GetCompletionTokens() != uint32(want) || g.result.GetUsage().GetPromptTokens() != 100 {
		t.Errorf("stop %q: %d tokens, usage %v; want %d (the answer without it: %q)", word, len(g.tokens), g.result.GetUsage(), want, tok.Decode(whole.tokens[:4]))
	}
	if got := g.result.GetUsage().GetCachedTokens(); got != 96 {
		t.Errorf("cached %d tokens, want the 96 of the prompt the first request left", got)
	}
	if len(whole.tokens) != 200 {
		t.Errorf("without a stop sequence: %d tokens, want max_tokens 200", len(whole.tokens))
	}
	// The engine ended it as finished, not aborted, and runs nothing.
	h.svc.d.mu.Lock()
	st := h.svc.d.eng.Stats()
	h.svc.d.mu.Unlock()
	if st.Running != 0 || st.Waiting != 0 || st.Finished != 2 || st.Aborted != 0 {
		t.Errorf("engine after the stop: %d running, %d waiting, %d finished, %d aborted; want 0, 0, 2, 0", st.Running, st.Waiting, st.Finished, st.Aborted)
	}
}

func uint64sOf[T ~uint64](v []T) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(x)
	}
	return out
}

func TestGenerateErrors(t *testing.T) {
	h := start(t, testConfig())
	for _, tc := range []struct {
		name string
		req  *enginev1.GenerateRequest
		want codes.Code
	}{
		{"no id", &enginev1.GenerateRequest{TokenIds: seq(0, 4)}, codes.InvalidArgument},
		{"no prompt", &enginev1.GenerateRequest{RequestId: "x"}, codes.InvalidArgument},
		{"prompt larger than the cache", &enginev1.GenerateRequest{RequestId: "x", TokenIds: seq(0, 256*16)}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := h.client.Generate(context.Background(), tc.req)
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCancelAbortsTheRequest(t *testing.T) {
	cfg := testConfig()
	cfg.SpeedUp = 1 // slow enough to cancel mid-stream
	h := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := h.client.Generate(ctx, &enginev1.GenerateRequest{
		RequestId: "long", TokenIds: seq(0, 64),
		Sampling: &enginev1.SamplingParams{MaxTokens: 100000, IgnoreEos: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	// Running, it is what a heartbeat names once it has run long; its
	// stream ended, it is not.
	named := func() []string {
		return h.svc.running.longer(time.Now().Add(registry.LongRunning), registry.LongRunning)
	}
	if got := named(); !slices.Equal(got, []string{"long"}) {
		t.Fatalf("running long: %v, want [long]", got)
	}
	cancel()
	servicetest.Eventually(t, "the aborted request no longer named running", func() bool { return len(named()) == 0 })
	var load *workerv1.WorkerLoad
	servicetest.Eventually(t, "the aborted request to stop running", func() bool {
		resp, err := h.client.GetLoad(context.Background(), &enginev1.GetLoadRequest{})
		if err != nil {
			t.Fatal(err)
		}
		load = resp.GetLoad()
		return load.GetRunningRequests() == 0 && load.GetActiveKvBlocks() == 0
	})
	if load.GetUsedKvBlocks() == 0 {
		t.Fatal("aborted request's blocks were dropped, not kept cached")
	}
}

// index applies KvEvents the way an indexer does, per tier.
type index map[kvv1.Tier]map[uint64]bool

func (x index) apply(t *testing.T, evs []*kvv1.KvEvent) {
	t.Helper()
	for _, e := range evs {
		switch p := e.GetEvent().(type) {
		case *kvv1.KvEvent_Stored:
			if x[e.GetTier()] == nil {
				x[e.GetTier()] = map[uint64]bool{}
			}
			for _, h := range p.Stored.GetBlockHashes() {
				x[e.GetTier()][h] = true
			}
		case *kvv1.KvEvent_Removed:
			for _, h := range p.Removed.GetBlockHashes() {
				if !x[e.GetTier()][h] {
					t.Fatalf("removed unknown block %x", h)
				}
				delete(x[e.GetTier()], h)
			}
		case *kvv1.KvEvent_Cleared:
			clear(x)
		}
	}
}

func (x index) equal(y index) bool {
	for _, t := range []kvv1.Tier{kvv1.Tier_TIER_DEVICE, kvv1.Tier_TIER_HOST, kvv1.Tier_TIER_DISK} {
		if len(x[t]) != len(y[t]) {
			return false
		}
		for h := range x[t] {
			if !y[t][h] {
				return false
			}
		}
	}
	return true
}

func TestSubscribeReplayAndResync(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 24 // small: requests evict each other's blocks
	cfg.HostBlocks = 8
	cfg.ReplayBatches = 4
	h := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A live subscriber from the start sees every batch, numbered 1, 2, ...
	// provided it keeps within the replay buffer. Opening the stream does
	// not wait for the shim to read the cursor, so the work below is paced
	// by the subscriber: each request's batches (fewer than the buffer
	// holds) are received before the next request starts. Unpaced, a busy
	// machine can start the handler after sequence 1 has left the buffer.
	live, err := h.client.SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		liveIdx  = index{}
		liveLast uint64
		liveErr  error
	)
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		for {
			resp, err := live.Recv()
			if err != nil {
				mu.Lock()
				if status.Code(err) != codes.Canceled {
					liveErr = err
				}
				mu.Unlock()
				return
			}
			b := resp.GetBatch()
			mu.Lock()
			if b.GetSequence() != liveLast+1 || b.GetWorkerId() != "w-test" || b.GetEpoch() != h.svc.Epoch() {
				liveErr = status.Errorf(codes.Internal, "batch %d after %d (worker %q epoch %d)", b.GetSequence(), liveLast, b.GetWorkerId(), b.GetEpoch())
			}
			liveLast = b.GetSequence()
			liveIdx.apply(t, b.GetEvents())
			mu.Unlock()
		}
	}()

	// liveReached waits until the live subscriber has received batch seq,
	// and fails the test if its stream ended first.
	liveReached := func(seq uint64) {
		t.Helper()
		var (
			last  uint64
			err   error
			ended bool
		)
		reached := servicetest.Poll(servicetest.Patience, func() bool {
			select {
			case <-liveDone:
				ended = true
			default:
			}
			mu.Lock()
			last, err = liveLast, liveErr
			mu.Unlock()
			return last >= seq || ended
		})
		if !reached || last < seq {
			t.Fatalf("live subscriber stopped at batch %d, before %d (stream ended: %v): %v", last, seq, ended, err)
		}
	}

	var published uint64
	for i := range 6 {
		generate(t, h.client, &enginev1.GenerateRequest{
			RequestId: "r" + string(rune('a'+i)), Agent: &agentv1.AgentContext{SessionId: "s"},
			TokenIds: seq(1000*i, 100), Sampling: &enginev1.SamplingParams{MaxTokens: 3, IgnoreEos: true},
		})
		prev := published
		published = h.svc.d.nextSequence() - 1
		if published-prev >= uint64(cfg.ReplayBatches) {
			t.Fatalf("request %d made %d batches: the live subscriber can fall out of the %d-batch buffer", i, published-prev, cfg.ReplayBatches)
		}
		liveReached(published)
	}
	snap, err := h.client.GetKvSnapshot(ctx, &enginev1.GetKvSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetSequence() < 6 || snap.GetEpoch() != h.svc.Epoch() {
		t.Fatalf("snapshot at sequence %d epoch %d", snap.GetSequence(), snap.GetEpoch())
	}

	// Sequence 1 has left the 4-batch buffer: the answer says resync.
	old, err := h.client.SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: 1})
	if err == nil {
		_, err = old.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("subscribe from a dropped sequence: %v, want OUT_OF_RANGE", err)
	}

	// A cursor from a previous epoch (ahead of this stream) also says resync.
	ahead, err := h.client.SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: snap.GetSequence() + 100})
	if err == nil {
		_, err = ahead.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("subscribe from a future sequence: %v, want OUT_OF_RANGE", err)
	}

	// Resync: the snapshot, then the stream from its sequence + 1.
	resynced := index{}
	resynced.apply(t, snap.GetEvents())
	sub, err := h.client.SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: snap.GetSequence() + 1})
	if err != nil {
		t.Fatal(err)
	}
	generate(t, h.client, &enginev1.GenerateRequest{RequestId: "after", TokenIds: seq(50000, 100), Sampling: &enginev1.SamplingParams{MaxTokens: 2, IgnoreEos: true}})
	final, err := h.client.GetKvSnapshot(ctx, &enginev1.GetKvSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for next := snap.GetSequence() + 1; next <= final.GetSequence(); next++ {
		resp, err := sub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetBatch().GetSequence() != next {
			t.Fatalf("got batch %d, want %d", resp.GetBatch().GetSequence(), next)
		}
		resynced.apply(t, resp.GetBatch().GetEvents())
	}
	want := index{}
	want.apply(t, final.GetEvents())
	if !resynced.equal(want) {
		t.Fatal("snapshot + stream != current snapshot")
	}
	// The live subscriber saw the same cache.
	liveReached(final.GetSequence())
	cancel()
	<-liveDone
	if liveErr != nil {
		t.Fatal(liveErr)
	}
	if !liveIdx.equal(want) {
		t.Fatal("live subscriber's index != snapshot")
	}
	if len(want[kvv1.Tier_TIER_HOST]) == 0 {
		t.Fatal("no blocks demoted to host: the test did not exercise tiers")
	}
}

func TestApplyKvHints(t *testing.T) {
	cfg := testConfig()
	cfg.HostBlocks = 64
	h := start(t, cfg)
	generate(t, h.client, &enginev1.GenerateRequest{RequestId: "a", Agent: &agentv1.AgentContext{SessionId: "s1"}, TokenIds: seq(0, 64), Sampling: &enginev1.SamplingParams{MaxTokens: 1}})
	resp, err := h.client.ApplyKvHints(context.Background(), &enginev1.ApplyKvHintsRequest{Envelope: &kvv1.KvHintEnvelope{
		ProtocolVersion: "0.1", MessageId: "m1",
		Actions: []*kvv1.KvHintAction{
			{ActionId: "1", Payload: &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{SessionId: "s1"}}},
			{ActionId: "2", Payload: &kvv1.KvHintAction_Prefetch{Prefetch: &kvv1.PrefetchHint{SessionId: "s1"}}},
			{ActionId: "3", Payload: &kvv1.KvHintAction_Pin{Pin: &kvv1.PinHint{SessionId: "s1"}}},
			{ActionId: "4", ActionType: "kv.mystery@9", Payload: &kvv1.KvHintAction_OpaquePayload{OpaquePayload: []byte("x")}},
			{ActionId: "5", Payload: &kvv1.KvHintAction_ReleaseSession{ReleaseSession: &kvv1.ReleaseSessionHint{SessionId: "s1"}}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []kvv1.HintResult{
		kvv1.HintResult_HINT_RESULT_ACCEPTED, kvv1.HintResult_HINT_RESULT_ACCEPTED,
		kvv1.HintResult_HINT_RESULT_REJECTED, kvv1.HintResult_HINT_RESULT_REJECTED,
		kvv1.HintResult_HINT_RESULT_ACCEPTED,
	}
	if resp.GetMessageId() != "m1" || len(resp.GetOutcomes()) != len(want) {
		t.Fatalf("response %v", resp)
	}
	for i, o := range resp.GetOutcomes() {
		if o.GetActionId() != strconv.Itoa(i+1) || o.GetResult() != want[i] {
			t.Errorf("outcome %d: %v, want %v", i, o, want[i])
		}
	}
	if n := resp.GetOutcomes()[0].GetBlocksAffected(); n != 4 {
		t.Errorf("demote moved %d blocks, want 4", n)
	}
}

func TestMetricsUseVLLMNames(t *testing.T) {
	h := start(t, testConfig())
	generate(t, h.client, &enginev1.GenerateRequest{RequestId: "a", TokenIds: seq(0, 40), Sampling: &enginev1.SamplingParams{MaxTokens: 2}})
	generate(t, h.client, &enginev1.GenerateRequest{RequestId: "b", TokenIds: seq(0, 40), Sampling: &enginev1.SamplingParams{MaxTokens: 2}})
	mfs, err := h.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				got[mf.GetName()] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("missing %s", name)
		}
	}
	if got["vllm:prefix_cache_queries_total"] != 80 || got["vllm:prefix_cache_hits_total"] != 32 {
		t.Errorf("prefix cache counters: queries %v hits %v, want 80 and 32", got["vllm:prefix_cache_queries_total"], got["vllm:prefix_cache_hits_total"])
	}
	if got["switchyard_engine_shim_generated_tokens_total"] != 4 {
		t.Errorf("generated tokens %v", got["switchyard_engine_shim_generated_tokens_total"])
	}
}

// fakeScheduler records registrations and forgets the worker once.
type fakeScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	mu          sync.Mutex
	registers   []string
	heartbeats  int
	forgetAfter int
	known       bool
	changed     chan struct{}
	lease       time.Duration // granted lease; 150 ms when zero
	named       []string      // the last heartbeat's long-running requests
}

func (f *fakeScheduler) leaseTTL() *durationpb.Duration {
	if f.lease > 0 {
		return durationpb.New(f.lease)
	}
	return durationpb.New(150 * time.Millisecond)
}

func (f *fakeScheduler) RegisterWorker(_ context.Context, req *schedulerv1.RegisterWorkerRequest) (*schedulerv1.RegisterWorkerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registers = append(f.registers, req.GetWorker().GetWorkerId()+"@"+req.GetWorker().GetAddress())
	f.known = true
	f.notify()
	return &schedulerv1.RegisterWorkerResponse{LeaseTtl: f.leaseTTL()}, nil
}

func (f *fakeScheduler) Heartbeat(_ context.Context, req *schedulerv1.HeartbeatRequest) (*schedulerv1.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known {
		return nil, status.Error(codes.NotFound, "unknown worker")
	}
	f.heartbeats++
	f.named = req.GetLongRunningRequestIds()
	if f.heartbeats == f.forgetAfter {
		f.known = false
	}
	f.notify()
	return &schedulerv1.HeartbeatResponse{LeaseTtl: f.leaseTTL()}, nil
}

func (f *fakeScheduler) DeregisterWorker(context.Context, *schedulerv1.DeregisterWorkerRequest) (*schedulerv1.DeregisterWorkerResponse, error) {
	return &schedulerv1.DeregisterWorkerResponse{}, nil
}

func (f *fakeScheduler) notify() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func TestRegistersHeartbeatsAndReRegisters(t *testing.T) {
	fake := &fakeScheduler{forgetAfter: 2, changed: make(chan struct{}, 1)}
	cfg := testConfig()
	cfg.SchedulerAddr = servicetest.Serve(t, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, fake) })
	cfg.RegisterRetry = 10 * time.Millisecond
	h := start(t, cfg)
	for {
		servicetest.Within(t, fake.changed, "two registrations and three heartbeats")
		fake.mu.Lock()
		n, hb := len(fake.registers), fake.heartbeats
		regs := slices.Clone(fake.registers)
		fake.mu.Unlock()
		if n >= 2 && hb >= 3 {
			want := "w-test@" + h.srv.GRPCAddr()
			if regs[0] != want || regs[1] != want {
				t.Fatalf("registrations %v, want %s twice", regs, want)
			}
			return
		}
	}
}

// A request generating for registry.LongRunning is named in the heartbeats
// (the scheduler then keeps its load past its stale age), until its stream
// ends.
func TestHeartbeatsNameLongRunningRequests(t *testing.T) {
	fake := &fakeScheduler{changed: make(chan struct{}, 1)}
	cfg := testConfig()
	cfg.SpeedUp = 1 // slow enough to stay running
	cfg.SchedulerAddr = servicetest.Serve(t, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, fake) })
	h := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := h.client.Generate(ctx, &enginev1.GenerateRequest{RequestId: "long", TokenIds: seq(0, 64),
		Sampling: &enginev1.SamplingParams{MaxTokens: 100000, IgnoreEos: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	named := func() []string {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return fake.named
	}
	if got := named(); len(got) != 0 {
		t.Fatalf("a request just begun named running long: %v", got)
	}
	// It began registry.LongRunning ago (the test does not wait for it).
	h.svc.running.mu.Lock()
	e := h.svc.running.began["long"]
	e.began = e.began.Add(-registry.LongRunning)
	h.svc.running.began["long"] = e
	h.svc.running.mu.Unlock()
	servicetest.Eventually(t, "a heartbeat naming it", func() bool { return slices.Equal(named(), []string{"long"}) })
	cancel()
	servicetest.Eventually(t, "a heartbeat naming nothing", func() bool { return len(named()) == 0 })
}

func TestRESTGatewayAndMetricsEndpoint(t *testing.T) {
	h := start(t, testConfig())
	generate(t, h.client, &enginev1.GenerateRequest{RequestId: "a", TokenIds: seq(0, 40), Sampling: &enginev1.SamplingParams{MaxTokens: 2}})
	get := func(path string) string { return servicetest.Get(t, "http://"+h.srv.HTTPAddr()+path) }
	var load enginev1.GetLoadResponse
	if err := protojson.Unmarshal([]byte(get("/v1/load")), &load); err != nil {
		t.Fatal(err)
	}
	if load.GetWorkerId() != "w-test" || load.GetCapacity().GetGpuBlocks() != 256 || load.GetCapacity().GetKvCapacityTokens() != 256*16 {
		t.Fatalf("load %v", &load)
	}
	if m := get("/metrics"); !strings.Contains(m, "vllm:num_requests_running{") || !strings.Contains(m, "vllm:prefix_cache_queries_total{") {
		t.Fatalf("metrics lack vLLM names:\n%s", m)
	}
}

func TestShutdownDrainsRequestsInFlight(t *testing.T) {
	cfg := testConfig()
	cfg.SpeedUp = 1 // ~6 ms per token: the request is still running at shutdown
	run, _ := startShim(t, servicekit.Options{Name: "engine-shim", ShutdownTimeout: 5 * time.Second}, cfg)
	client := enginev1.NewEngineShimServiceClient(run.Conn)
	stream, err := client.Generate(context.Background(), &enginev1.GenerateRequest{
		RequestId: "in-flight", TokenIds: seq(0, 64),
		Sampling: &enginev1.SamplingParams{MaxTokens: 30, IgnoreEos: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	run.Cancel() // SIGTERM
	var n int
	var result *enginev1.GenerateResult
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("request in flight failed during shutdown: %v", err)
		}
		n += len(resp.GetDelta().GetTokenIds())
		if r := resp.GetResult(); r != nil {
			result = r
		}
	}
	if result == nil || result.GetUsage().GetCompletionTokens() != 30 {
		t.Fatalf("drained request ended with %v after %d more tokens", result, n)
	}
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestMainFlagsAndEnvironment(t *testing.T) {
	t.Setenv("SWITCHYARD_NUM_GPU_BLOCKS", "not-a-number")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Main(ctx, []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", ""}); err == nil {
		t.Fatal("a bad SWITCHYARD_NUM_GPU_BLOCKS was accepted")
	}
	t.Setenv("SWITCHYARD_NUM_GPU_BLOCKS", "64")
	if err := Main(ctx, []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "", "--block-size", "-3"}); err == nil || !strings.Contains(err.Error(), "block size") {
		t.Fatalf("an invalid engine configuration: %v", err)
	}
	if err := Main(ctx, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}
