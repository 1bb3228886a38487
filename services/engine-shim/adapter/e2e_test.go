package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/services/engine-shim/protofake"
	"switchyard.dev/services/servicekit/servicetest"
)

// These tests drive the adapter against protofake, a protocol fake of vLLM
// and SGLang (no real engine runs on the build machines).

// index follows the sink like an indexer would: resident blocks per tier.
type index struct {
	mu       sync.Mutex
	resident map[kv.BlockHash]bool // device tier only: the fake has no other
	cleared  int
	events   int
}

func (ix *index) sink(evs []kv.Event) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, e := range evs {
		ix.events++
		switch e.Kind {
		case kv.Stored:
			for _, b := range e.Blocks {
				ix.resident[b] = true
			}
		case kv.Removed:
			for _, b := range e.Blocks {
				delete(ix.resident, b)
			}
		case kv.Cleared:
			clear(ix.resident)
			ix.cleared++
		}
	}
}

func (ix *index) snapshot() (map[kv.BlockHash]bool, int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make(map[kv.BlockHash]bool, len(ix.resident))
	for k := range ix.resident {
		out[k] = true
	}
	return out, ix.cleared
}

// patience bounds the waits for the fake engine's HTTP and ZMQ traffic: it
// only catches hangs (it is not a timing assertion).
const patience = 15 * time.Second

type rig struct {
	fake *protofake.Engine
	b    *Backend
	ix   *index
}

func startRig(t *testing.T, fc protofake.Config, mod func(*Config)) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fake, err := protofake.Start(ctx, fc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Engine = Engine(fc.Engine)
	cfg.URL = fake.URL()
	cfg.EventsEndpoint = fake.EventsEndpoint()
	cfg.ReplayEndpoint = fake.ReplayEndpoint()
	cfg.Model = "fake-model"
	cfg.BlockSize = 16
	cfg.MetricsInterval = 20 * time.Millisecond
	cfg.RetryWait = 50 * time.Millisecond
	cfg.ReplayIdle = 10 * time.Second // a loaded CI machine must not turn a replay into a resync
	if mod != nil {
		mod(&cfg)
	}
	ix := &index{resident: map[kv.BlockHash]bool{}}
	b, err := New(cfg, ix.sink, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		fake.Close()
	})
	r := &rig{fake: fake, b: b, ix: ix}
	// The subscription is up once a published batch comes through
	// (ZMQ drops what a PUB sends before the SUB has joined).
	servicetest.EventuallyWithin(t, patience, "subscription", func() bool {
		if err := fake.Clear(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		_, c := ix.snapshot()
		return c > 0
	})
	return r
}

func prompt(seed, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(seed*1000 + i)
	}
	return out
}

func (r *rig) generate(t *testing.T, req *enginev1.GenerateRequest) ([]uint32, *enginev1.GenerateResult) {
	t.Helper()
	var got []uint32
	res, err := r.b.Generate(context.Background(), req, func(toks []uint32) error {
		got = append(got, toks...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, res
}

// wantResident is every full block of each sequence (prompt + output) under
// Switchyard's hashing.
func wantResident(blockSize int, lora, salt string, seqs ...[]uint32) map[kv.BlockHash]bool {
	h := kvhash.New(blockSize, lora, salt)
	out := map[kv.BlockHash]bool{}
	for _, s := range seqs {
		for _, b := range h.Blocks(s) {
			out[b] = true
		}
	}
	return out
}

func sameSet(a, b map[kv.BlockHash]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func TestEndToEndVLLM(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.VLLM, BlockSize: 16}, nil)
	p := prompt(1, 64)
	req := &enginev1.GenerateRequest{
		RequestId: "r1", TokenIds: p, CacheSalt: "tenant-a",
		Agent:    &agentv1.AgentContext{Tenant: "acme", SessionId: "sess-1"},
		Sampling: &enginev1.SamplingParams{MaxTokens: 20, Temperature: proto.Float32(0.5), TopP: 0.9, Seed: 7, StopTokenIds: []uint32{999999}},
	}
	out, res := r.generate(t, req)
	if len(out) != 20 || res.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_LENGTH {
		t.Fatalf("got %d tokens, finish %v", len(out), res.GetFinishReason())
	}
	if u := res.GetUsage(); u.GetPromptTokens() != 64 || u.GetCompletionTokens() != 20 || u.GetCachedTokens() != 0 {
		t.Fatalf("usage %v", u)
	}
	// The events of the prompt and of the output's full blocks arrive
	// under Switchyard's hashes of the salted sequence.
	want := wantResident(16, "", "tenant-a", append(slices.Clone(p), out...))
	servicetest.EventuallyWithin(t, patience, "stored blocks", func() bool { got, _ := r.ix.snapshot(); return sameSet(got, want) })

	// The same prompt again is served from the cache; this time the
	// client set no temperature.
	req.RequestId = "r2"
	req.Sampling.Temperature = nil
	_, res = r.generate(t, req)
	if res.GetUsage().GetCachedTokens() != 64 {
		t.Fatalf("cached tokens %d, want 64", res.GetUsage().GetCachedTokens())
	}

	// What the engine was sent.
	sent := r.fake.Requests()[0]
	b := sent.Body
	if b["return_token_ids"] != true || b["stream"] != true || b["cache_salt"] != "tenant-a" || fmt.Sprint(b["max_tokens"]) != "20" ||
		fmt.Sprint(b["seed"]) != "7" || fmt.Sprint(b["stop_token_ids"]) != "[999999]" || b["model"] != "fake-model" ||
		fmt.Sprint(b["temperature"]) != "0.5" {
		t.Fatalf("body %v", b)
	}
	// A temperature the client did not set is the engine's to choose:
	// sent as 0, it made the engine decode greedily.
	if tmp, set := r.fake.Requests()[1].Body["temperature"]; set {
		t.Errorf("a request without a temperature was sent temperature %v", tmp)
	}
	// The engine knows the session by its tenant and id: another tenant's
	// session of the same id is another session there.
	if sent.Header.Get("X-Session-ID") != "acme:sess-1" || sent.Header.Get("X-Request-Id") != "r1" {
		t.Fatalf("headers %v", sent.Header)
	}

	// Load and capacity from /metrics.
	servicetest.EventuallyWithin(t, patience, "metrics", func() bool { return r.b.Capacity().GetGpuBlocks() == 1024 })
	if l := r.b.Load(); l.GetTotalKvBlocks() != 1024 || l.GetPrefixHitRate() != 0.25 || l.GetPreemptions() != 3 || l.GetObservedAt() == nil {
		t.Fatalf("load %v", l)
	}
	// The snapshot matches what the events said.
	var snap []kv.Event
	r.b.Snapshot(func(evs []kv.Event) { snap = evs })
	got, _ := r.ix.snapshot()
	if len(snap) != len(got) {
		t.Fatalf("snapshot %d blocks, events say %d", len(snap), len(got))
	}
}

func TestEndToEndGapReplay(t *testing.T) {
	for _, tc := range []struct {
		name string
		fc   protofake.Config
	}{
		{"vllm three-frame replay", protofake.Config{Engine: protofake.VLLM, BlockSize: 16, NumGPUBlocks: 12}},
		{"sglang two-frame replay, map events, byte hashes", protofake.Config{Engine: protofake.SGLang, BlockSize: 16, NumGPUBlocks: 12, TwoFrameReplay: true, MapEvents: true, ByteHashes: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRig(t, tc.fc, nil)
			r.fake.DropNext(3) // the next batches reach only the replay buffer
			var seqs [][]uint32
			for i := range 4 {
				p := prompt(10+i, 48)
				out, _ := r.generate(t, &enginev1.GenerateRequest{RequestId: fmt.Sprint("g", i), TokenIds: p, Sampling: &enginev1.SamplingParams{MaxTokens: 16}})
				seqs = append(seqs, append(p, out...))
			}
			// 12 blocks of capacity: the fake evicted the oldest; the index
			// must hold exactly what the engine holds.
			servicetest.EventuallyWithin(t, patience, "replayed state", func() bool {
				got, _ := r.ix.snapshot()
				return len(got) == len(r.fake.CachedHashes()) && r.b.Stats().Replays > 0
			})
			st := r.b.Stats()
			if st.Gaps == 0 || st.Resyncs != 0 || st.ReplayFailures != 0 {
				t.Fatalf("stats %+v", st)
			}
			got, _ := r.ix.snapshot()
			all := wantResident(16, "", "", seqs...)
			for h := range got {
				if !all[h] {
					t.Fatalf("index holds %x, which no request stored", h)
				}
			}
		})
	}
}

func TestEndToEndGapWithoutReplayResyncs(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.VLLM, BlockSize: 16}, func(c *Config) { c.ReplayEndpoint = "" })
	_, before := r.ix.snapshot()
	resyncs := r.b.Stats().Resyncs
	r.fake.DropNext(1)
	r.generate(t, &enginev1.GenerateRequest{RequestId: "a", TokenIds: prompt(1, 32), Sampling: &enginev1.SamplingParams{MaxTokens: 4}})
	p := prompt(2, 32)
	out, _ := r.generate(t, &enginev1.GenerateRequest{RequestId: "b", TokenIds: p, Sampling: &enginev1.SamplingParams{MaxTokens: 4}})
	// The counter moves before the resync reaches the sink; b's blocks,
	// applied after it, show the sink has seen the resync.
	want := wantResident(16, "", "", append(p, out...))
	servicetest.EventuallyWithin(t, patience, "b's blocks after the gap", func() bool { got, _ := r.ix.snapshot(); return sameSet(got, want) })
	if st := r.b.Stats(); st.Resyncs <= resyncs {
		t.Fatalf("gap without a replay endpoint did not resync: %+v", st)
	}
	if _, after := r.ix.snapshot(); after <= before {
		t.Fatalf("resync did not report Cleared: before %d after %d, %+v", before, after, r.b.Stats())
	}
}

// A replay with a hole in the middle is not applied across it: the batches
// before the hole stored blocks that the lost batch (here a clear) removed,
// and indexing them would answer hits the engine cannot serve. The rank is
// resynchronised and rebuilt from what follows the hole.
func TestEndToEndReplayHoleResyncs(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.VLLM, BlockSize: 16}, nil)
	resyncs := r.b.Stats().Resyncs
	r.fake.DropNext(math.MaxInt) // a's batches and the clear reach only the replay buffer
	r.generate(t, &enginev1.GenerateRequest{RequestId: "a", TokenIds: prompt(1, 32), Sampling: &enginev1.SamplingParams{MaxTokens: 4}})
	lost := r.fake.Sequence()
	if err := r.fake.Clear(); err != nil {
		t.Fatal(err)
	}
	r.fake.Forget(lost)
	r.fake.DropNext(0)
	// b's batch comes live: the gap is replayed from a's batches on, with
	// the clear missing in the middle.
	p := prompt(2, 32)
	out, _ := r.generate(t, &enginev1.GenerateRequest{RequestId: "b", TokenIds: p, Sampling: &enginev1.SamplingParams{MaxTokens: 4}})
	want := wantResident(16, "", "", append(p, out...))
	servicetest.EventuallyWithin(t, patience, "b's blocks", func() bool {
		got, _ := r.ix.snapshot()
		for h := range want {
			if !got[h] {
				return false
			}
		}
		return true
	})
	if got, _ := r.ix.snapshot(); !sameSet(got, want) {
		t.Fatalf("index holds %d blocks, the engine only b's %d", len(got), len(want))
	}
	if st := r.b.Stats(); st.Resyncs <= resyncs || st.ReplayFailures == 0 {
		t.Fatalf("replay with a hole did not resync: %+v", st)
	}
}

func TestEndToEndPublisherRestart(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.VLLM, BlockSize: 16}, nil)
	a, b := prompt(1, 32), prompt(2, 32)
	r.generate(t, &enginev1.GenerateRequest{RequestId: "a", TokenIds: a, Sampling: &enginev1.SamplingParams{MaxTokens: 4}})
	r.generate(t, &enginev1.GenerateRequest{RequestId: "b", TokenIds: b, Sampling: &enginev1.SamplingParams{MaxTokens: 4}})
	before := wantResident(16, "", "", a, b)
	servicetest.EventuallyWithin(t, patience, "events", func() bool { got, _ := r.ix.snapshot(); return sameSet(got, before) })
	r.fake.Restart()
	p := prompt(3, 32)
	out, _ := r.generate(t, &enginev1.GenerateRequest{RequestId: "c", TokenIds: p, Sampling: &enginev1.SamplingParams{MaxTokens: 4}})
	want := wantResident(16, "", "", append(p, out...))
	servicetest.EventuallyWithin(t, patience, "rebuilt state", func() bool { got, _ := r.ix.snapshot(); return sameSet(got, want) })
	if r.b.Stats().PublisherRestarts == 0 {
		t.Fatal("restart not detected")
	}
}

func TestEndToEndSGLang(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.SGLang, BlockSize: 16}, nil)
	p := prompt(5, 40)
	req := &enginev1.GenerateRequest{RequestId: "s1", TokenIds: p, CacheSalt: "t9", LoraName: "lora-q",
		Sampling: &enginev1.SamplingParams{MaxTokens: 9, IgnoreEos: true}}
	out, res := r.generate(t, req)
	if len(out) != 9 || res.GetUsage().GetCompletionTokens() != 9 || res.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_LENGTH {
		t.Fatalf("out %v result %v", out, res)
	}
	want := wantResident(16, "lora-q", "t9", append(slices.Clone(p), out...))
	// SGLang's salted store carries the salt; the LoRA name arrives in the
	// lora_name slot only for vLLM, so SGLang LoRA blocks hash with the salt
	// alone. The fake sends no lora_name for SGLang salted stores.
	wantNoLora := wantResident(16, "", "t9", append(slices.Clone(p), out...))
	servicetest.EventuallyWithin(t, patience, "stored blocks", func() bool {
		got, _ := r.ix.snapshot()
		return sameSet(got, want) || sameSet(got, wantNoLora)
	})
	b := r.fake.Requests()[0].Body
	sp, _ := b["sampling_params"].(map[string]any)
	if b["rid"] != "s1" || b["cache_salt"] != "t9" || b["lora_path"] != "lora-q" || fmt.Sprint(sp["max_new_tokens"]) != "9" || sp["ignore_eos"] != true {
		t.Fatalf("body %v", b)
	}
	servicetest.EventuallyWithin(t, patience, "metrics", func() bool { return r.b.Capacity().GetGpuBlocks() == 1024 })
	if l := r.b.Load(); l.GetPrefixHitRate() != 0.5 {
		t.Fatalf("load %v", l)
	}
	if c := r.b.Capacity(); c.GetMaxRunningRequests() != 64 {
		t.Fatalf("capacity %v", c)
	}
}

func TestEndToEndCancellation(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.VLLM, BlockSize: 16, TokenDelay: 5 * time.Millisecond}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := r.b.Generate(ctx, &enginev1.GenerateRequest{RequestId: "long", TokenIds: prompt(1, 16), Sampling: &enginev1.SamplingParams{MaxTokens: 100000}},
		func([]uint32) error { cancel(); return nil })
	if status.Code(err) != codes.Canceled {
		t.Fatalf("err %v, want Canceled", err)
	}
	servicetest.EventuallyWithin(t, patience, "engine abort", func() bool {
		rs := r.fake.Requests()
		return len(rs) == 1 && rs[0].Aborted
	})
	// A failing emitter (the client's stream broke) also aborts.
	boom := errors.New("stream broken")
	_, err = r.b.Generate(context.Background(), &enginev1.GenerateRequest{RequestId: "long2", TokenIds: prompt(2, 16), Sampling: &enginev1.SamplingParams{MaxTokens: 100000}},
		func([]uint32) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want the emitter's", err)
	}
	servicetest.EventuallyWithin(t, patience, "engine abort", func() bool {
		rs := r.fake.Requests()
		return len(rs) == 2 && rs[1].Aborted
	})
}

// A request without an output cap is sent an explicit null, which both
// engines read as what the context window leaves: left out, vLLM's
// completions API would stop at 16 tokens and SGLang at its own default.
func TestNoOutputCapIsTheEnginesContext(t *testing.T) {
	for _, engine := range []string{protofake.VLLM, protofake.SGLang} {
		r := startRig(t, protofake.Config{Engine: engine, BlockSize: 16}, nil)
		out, res := r.generate(t, &enginev1.GenerateRequest{RequestId: "r", TokenIds: prompt(1, 32), Sampling: &enginev1.SamplingParams{}})
		if res.GetFinishReason() != enginev1.FinishReason_FINISH_REASON_STOP || len(out) <= 16 {
			t.Errorf("%v: %d tokens, finish %v; want the answer's natural end, past 16", engine, len(out), res.GetFinishReason())
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.VLLM, BlockSize: 16}, func(c *Config) { c.Model = "other-model" })
	_, err := r.b.Generate(context.Background(), &enginev1.GenerateRequest{RequestId: "x", TokenIds: prompt(1, 4)}, func([]uint32) error { return nil })
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unknown model: %v", err)
	}
	// The engine's error JSON is read for its message, not pasted whole
	// into the message the client reads inside its own API's error JSON.
	if msg := status.Convert(err).Message(); strings.Contains(msg, "{") || !strings.Contains(msg, "model not found") {
		t.Errorf("unknown model's message %q, want the engine's message alone", msg)
	}
	_, err = r.b.Generate(context.Background(), &enginev1.GenerateRequest{RequestId: "x"}, func([]uint32) error { return nil })
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty prompt: %v", err)
	}
}

// Two data-parallel ranks publish on consecutive ports; the adapter follows
// both, and one rank's AllBlocksCleared removes only that rank's blocks.
func TestEndToEndDataParallelRanks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ranks [2]*protofake.Engine
	for try := 0; ranks[1] == nil; try++ {
		if try == 50 {
			t.Fatal("no two consecutive free ports")
		}
		r0, err := protofake.Start(ctx, protofake.Config{Engine: protofake.VLLM, BlockSize: 16})
		if err != nil {
			t.Fatal(err)
		}
		next := func(ep string) string {
			s, _ := RankEndpoint(ep, 1)
			return strings.TrimPrefix(s, "tcp://")
		}
		r1, err := protofake.Start(ctx, protofake.Config{Engine: protofake.VLLM, BlockSize: 16, DPRank: 1,
			EventsAddr: next(r0.EventsEndpoint()), ReplayAddr: next(r0.ReplayEndpoint())})
		if err != nil {
			r0.Close()
			continue
		}
		ranks = [2]*protofake.Engine{r0, r1}
	}
	defer ranks[0].Close()
	defer ranks[1].Close()

	ix := &index{resident: map[kv.BlockHash]bool{}}
	cfg := DefaultConfig()
	cfg.EventsEndpoint, cfg.ReplayEndpoint, cfg.DPSize = ranks[0].EventsEndpoint(), ranks[0].ReplayEndpoint(), 2
	cfg.URL, cfg.Model, cfg.RetryWait = ranks[0].URL(), "fake-model", 50*time.Millisecond
	b, err := New(cfg, ix.sink, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Generation on each rank (the second through a plain client of rank 1).
	gen := func(url string, p []uint32) []uint32 {
		c := cfg
		c.URL, c.EventsEndpoint, c.DPSize = url, "", 1
		g, err := New(c, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		var out []uint32
		if _, err := g.Generate(ctx, &enginev1.GenerateRequest{RequestId: "x", TokenIds: p, Sampling: &enginev1.SamplingParams{MaxTokens: 4}},
			func(toks []uint32) error { out = append(out, toks...); return nil }); err != nil {
			t.Fatal(err)
		}
		return append(slices.Clone(p), out...)
	}
	// Subscriptions settle (ZMQ drops what is published before joining):
	// the Clear batches are replayed from 0 on the first live message.
	servicetest.EventuallyWithin(t, patience, "both ranks", func() bool {
		for _, r := range ranks {
			if err := r.Clear(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
		return b.Stats().Batches >= 4
	})
	s0 := gen(ranks[0].URL(), prompt(1, 48))
	s1 := gen(ranks[1].URL(), prompt(2, 48))
	servicetest.EventuallyWithin(t, patience, "both ranks' blocks", func() bool {
		got, _ := ix.snapshot()
		return sameSet(got, wantResident(16, "", "", s0, s1))
	})
	_, clearedBefore := ix.snapshot()
	if err := ranks[1].Clear(); err != nil {
		t.Fatal(err)
	}
	servicetest.EventuallyWithin(t, patience, "rank 1 cleared", func() bool {
		got, _ := ix.snapshot()
		return sameSet(got, wantResident(16, "", "", s0))
	})
	if _, c := ix.snapshot(); c != clearedBefore {
		t.Fatal("one rank's clear reported Cleared for the whole worker")
	}
}

type fakeStream struct{ msgs []*enginev1.GenerateResponse }

func (f *fakeStream) Send(m *enginev1.GenerateResponse) error { f.msgs = append(f.msgs, m); return nil }

func TestServeGenerate(t *testing.T) {
	r := startRig(t, protofake.Config{Engine: protofake.SGLang, BlockSize: 16}, nil)
	var st fakeStream
	if err := r.b.ServeGenerate(context.Background(), &enginev1.GenerateRequest{RequestId: "q", TokenIds: prompt(1, 20), Sampling: &enginev1.SamplingParams{MaxTokens: 3}}, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.msgs) != 4 || st.msgs[3].GetResult().GetUsage().GetCompletionTokens() != 3 || st.msgs[0].GetDelta() == nil {
		t.Fatalf("stream %v", st.msgs)
	}
	resp := r.b.ServeApplyKvHints(&enginev1.ApplyKvHintsRequest{})
	if len(resp.GetOutcomes()) != 0 {
		t.Fatalf("%v", resp)
	}
}

// vLLM LoRA + salt: the model field names the adapter, the events carry
// lora_name and extra keys [lora, salt] in block 0 — all three encodings of
// the hash fields end in Switchyard's Seed(lora, salt).
func TestEndToEndVLLMLoraSalt(t *testing.T) {
	for _, fc := range []protofake.Config{
		{Engine: protofake.VLLM, BlockSize: 16},
		{Engine: protofake.VLLM, BlockSize: 16, MapEvents: true, ByteHashes: true},
		{Engine: protofake.VLLM, BlockSize: 32}, // engine blocks twice Switchyard's
	} {
		r := startRig(t, fc, nil)
		p := prompt(7, 96)
		out, _ := r.generate(t, &enginev1.GenerateRequest{RequestId: "l", TokenIds: p, LoraName: "lora-z", CacheSalt: "ten",
			Sampling: &enginev1.SamplingParams{MaxTokens: 3}})
		if m := r.fake.Requests()[0].Body["model"]; m != "lora-z" {
			t.Fatalf("model %v", m)
		}
		full := append(slices.Clone(p), out...)
		full = full[:len(full)/fc.BlockSize*fc.BlockSize] // the engine stores whole engine blocks
		want := wantResident(16, "lora-z", "ten", full)
		servicetest.EventuallyWithin(t, patience, "lora blocks", func() bool { got, _ := r.ix.snapshot(); return sameSet(got, want) })
	}
}
