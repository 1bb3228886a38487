package enginesim

import (
	"errors"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

func mustNew(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func seq(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// run steps until the engine is idle and returns each request's output,
// final output message and the events.
type runResult struct {
	tokens map[string][]uint32
	final  map[string]Output
	events []kv.Event
	steps  []StepResult
}

func runToIdle(t testing.TB, e *Engine) runResult {
	t.Helper()
	r := runResult{tokens: map[string][]uint32{}, final: map[string]Output{}}
	for i := 0; e.HasWork(); i++ {
		if i > 1e6 {
			t.Fatal("engine does not drain")
		}
		res := e.Step()
		for _, o := range res.Outputs {
			r.tokens[o.RequestID] = append(r.tokens[o.RequestID], o.Token)
			if o.Finish != FinishNone {
				r.final[o.RequestID] = o
			}
		}
		r.events = append(r.events, res.Events...)
		res.Outputs = slices.Clone(res.Outputs)
		res.Preempted = slices.Clone(res.Preempted)
		r.steps = append(r.steps, res)
	}
	return r
}

func TestAddValidation(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8})
	if err := e.Add(Request{ID: "a", Prompt: seq(0, 5)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  Request
		want error
	}{
		{"duplicate id", Request{ID: "a", Prompt: seq(0, 5)}, ErrDuplicateID},
		{"empty id", Request{Prompt: seq(0, 5)}, ErrInvalidRequest},
		{"empty prompt", Request{ID: "b"}, ErrInvalidRequest},
		{"negative max tokens", Request{ID: "b", Prompt: seq(0, 5), MaxTokens: -1}, ErrInvalidRequest},
		{"wrong number of hashes", Request{ID: "b", Prompt: seq(0, 9), BlockHashes: []kv.BlockHash{1}}, ErrInvalidRequest},
		{"prompt fills the cache", Request{ID: "b", Prompt: seq(0, 32)}, ErrPromptTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.Add(tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("Add = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := New(Config{BlockSize: -1}); err == nil {
		t.Fatal("negative block size accepted")
	}
}

func TestSecondTurnHitsCache(t *testing.T) {
	e := mustNew(t, Config{})
	turn1 := seq(1, 100)
	if err := e.Add(Request{ID: "t1", SessionID: "s", Prompt: turn1, MaxTokens: 20}); err != nil {
		t.Fatal(err)
	}
	r1 := runToIdle(t, e)
	if got := r1.final["t1"].Usage.CachedTokens; got != 0 {
		t.Fatalf("first turn cached %d tokens", got)
	}
	// Every Stored event of the turn names its session.
	for _, ev := range r1.events {
		if ev.Kind == kv.Stored && ev.SessionID != "s" {
			t.Fatalf("stored event without the session: %+v", ev)
		}
	}
	turn2 := append(append(slices.Clone(turn1), r1.tokens["t1"]...), seq(500, 30)...)
	if err := e.Add(Request{ID: "t2", SessionID: "s", Prompt: turn2, MaxTokens: 5}); err != nil {
		t.Fatal(err)
	}
	r2 := runToIdle(t, e)
	got := r2.final["t2"]
	// Turn 1's prompt and output were 120 tokens: 7 full blocks of 16 are
	// cached (the last one holds generated tokens, hashed by the engine).
	if want := 7 * 16; got.Usage.CachedTokens != want {
		t.Fatalf("second turn cached %d tokens, want %d", got.Usage.CachedTokens, want)
	}
	if r2.steps[0].Outputs[0].CachedTokens != got.Usage.CachedTokens || !r2.steps[0].Outputs[0].First {
		t.Fatalf("first output %+v does not report the cached tokens", r2.steps[0].Outputs[0])
	}
	// The engine's own hashes agree with the frontend's (kvhash over the
	// prompt).
	h := kvhash.New(16, "", "").Blocks(turn2)
	for i := range 7 {
		if e.pool.lookup(h[i]) == nilBlock {
			t.Fatalf("block %d of turn 2 not cached under the frontend's hash", i)
		}
	}
}

func TestOutputEnds(t *testing.T) {
	e := mustNew(t, Config{Vocab: []uint32{5, 6, 7}})
	for _, tc := range []struct {
		name       string
		req        Request
		wantLen    int
		wantFinish FinishReason
		wantTail   []uint32
	}{
		{"natural end", Request{OutputLen: 10, MaxTokens: 50}, 10, FinishStop, nil},
		{"max tokens", Request{OutputLen: 10, MaxTokens: 4}, 4, FinishLength, nil},
		{"ignore eos", Request{OutputLen: 10, MaxTokens: 30, IgnoreEOS: true}, 30, FinishLength, nil},
		{"tool call", Request{OutputLen: 10, MaxTokens: 50, ToolCall: []uint32{90, 91}}, 12, FinishToolCalls, []uint32{90, 91}},
		{"tool call squeezed by max tokens", Request{OutputLen: 10, MaxTokens: 5, ToolCall: []uint32{90, 91}}, 5, FinishToolCalls, []uint32{90, 91}},
		{"tool call cut by max tokens", Request{OutputLen: 10, MaxTokens: 1, ToolCall: []uint32{90, 91}}, 1, FinishLength, []uint32{90}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.ID, req.Prompt = tc.name, seq(0, 20)
			if err := e.Add(req); err != nil {
				t.Fatal(err)
			}
			r := runToIdle(t, e)
			toks, fin := r.tokens[req.ID], r.final[req.ID]
			if len(toks) != tc.wantLen || fin.Finish != tc.wantFinish {
				t.Fatalf("got %d tokens, finish %v; want %d, %v", len(toks), fin.Finish, tc.wantLen, tc.wantFinish)
			}
			if tc.wantTail != nil && !slices.Equal(toks[len(toks)-len(tc.wantTail):], tc.wantTail) {
				t.Fatalf("output %v does not end with %v", toks, tc.wantTail)
			}
			if fin.Usage.CompletionTokens != len(toks) || fin.Usage.PromptTokens != 20 {
				t.Fatalf("usage %+v", *fin.Usage)
			}
		})
	}
	// A stop token ends the output early, and is its last token.
	if err := e.Add(Request{ID: "stop", Prompt: seq(0, 20), OutputLen: 1000, MaxTokens: 1000, StopTokenIDs: []uint32{7}}); err != nil {
		t.Fatal(err)
	}
	r := runToIdle(t, e)
	toks := r.tokens["stop"]
	if r.final["stop"].Finish != FinishStop || toks[len(toks)-1] != 7 || slices.Contains(toks[:len(toks)-1], 7) {
		t.Fatalf("stop token: output %v, finish %v", toks, r.final["stop"].Finish)
	}
}

func TestSameSeedSameTokens(t *testing.T) {
	gen := func(seed int64, id string) []uint32 {
		e := mustNew(t, Config{Seed: 1})
		if err := e.Add(Request{ID: id, Prompt: seq(0, 40), Seed: seed, MaxTokens: 64, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
		return runToIdle(t, e).tokens[id]
	}
	a, b := gen(7, "x"), gen(7, "y")
	if !slices.Equal(a, b) {
		t.Fatal("same request seed, different tokens")
	}
	if slices.Equal(a, gen(8, "x")) {
		t.Fatal("different seeds, same tokens")
	}
	if slices.Equal(gen(0, "x"), gen(0, "y")) {
		t.Fatal("unseeded requests with different ids produced the same tokens")
	}
}

func TestAbortFreesBlocksAndKeepsThemCached(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 16})
	if err := e.Add(Request{ID: "a", Prompt: seq(0, 20), MaxTokens: 100, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	e.Step()
	if st := e.Stats(); st.Tiers[kv.TierDevice].Used != 5 {
		t.Fatalf("%d blocks in use, want 5", st.Tiers[kv.TierDevice].Used)
	}
	if !e.Abort("a") || e.Abort("a") {
		t.Fatal("Abort should find the request exactly once")
	}
	st := e.Stats()
	if st.Tiers[kv.TierDevice].Used != 0 || st.Tiers[kv.TierDevice].Resident != 5 || e.HasWork() {
		t.Fatalf("after abort: %+v", st.Tiers[kv.TierDevice])
	}
	if err := e.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestStepDurationsGolden(t *testing.T) {
	// One 1000-token prompt on an empty 1600-token cache, 3 output tokens,
	// twice as fast as modelled by the mocker's polynomials (whose decode
	// depends on KV usage): prefill step then two decode steps.
	e := mustNew(t, Config{NumGPUBlocks: 100, SpeedUp: 2, Perf: DefaultMockerModel()})
	if err := e.Add(Request{ID: "a", Prompt: seq(0, 1000), MaxTokens: 3, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	r := runToIdle(t, e)
	var got []time.Duration
	for _, s := range r.steps {
		got = append(got, s.Duration.Round(time.Microsecond))
	}
	// u = 63/100 blocks in use during both decodes (1001, 1002 tokens).
	u := 0.63
	dec := (-25.74*u*u + 54.01*u + 5.74) / 2
	want := []time.Duration{
		time.Duration(16052929).Round(time.Microsecond),
		time.Duration(dec * 1e6).Round(time.Microsecond),
		time.Duration(dec * 1e6).Round(time.Microsecond),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("step durations (-want +got):\n%s", diff)
	}
}

// The decode path is memory-bound: keep a request at four cache lines with
// its hot fields in the first two (see request).
func TestRequestLayout(t *testing.T) {
	if got := unsafe.Sizeof(request{}); got != 256 {
		t.Errorf("request is %d bytes, want 256", got)
	}
	if got := unsafe.Offsetof(request{}.prompt); got > 128 {
		t.Errorf("hot fields end at byte %d, want <= 128", got)
	}
}

// TestPriorityOrdersWaitingQueue: with one running slot, waiting requests
// run by priority (lower first), arrival order within a priority, as under
// vLLM's priority scheduling.
func TestPriorityOrdersWaitingQueue(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 64, MaxNumSeqs: 1, MaxNumBatchedTokens: 64})
	for i, r := range []struct {
		id   string
		prio int32
	}{{"first", 0}, {"late", 2}, {"normal-1", 0}, {"urgent", -1}, {"normal-2", 0}, {"later", 2}} {
		if err := e.Add(Request{ID: r.id, Prompt: seq(100*i, 8), MaxTokens: 2, IgnoreEOS: true, Priority: r.prio}); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	for e.HasWork() {
		for _, o := range e.Step().Outputs {
			if o.Finish != FinishNone {
				order = append(order, o.RequestID)
			}
		}
		if err := e.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"urgent", "first", "normal-1", "normal-2", "late", "later"}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Fatalf("finish order (-want +got):\n%s", diff)
	}
}

// TestPreemptedGoesToFrontOfItsPriority: a preempted request waits ahead of
// the requests of its priority but behind more urgent ones.
func TestPreemptedGoesToFrontOfItsPriority(t *testing.T) {
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 64})
	for _, r := range []struct {
		id   string
		prio int32
	}{{"urgent", -1}, {"a", 0}, {"b", 0}, {"lazy", 1}} {
		e.reqs = append(e.reqs, request{id: r.id, priority: r.prio, state: stateWaiting})
		e.enqueue(int32(len(e.reqs)-1), false)
	}
	e.reqs = append(e.reqs, request{id: "back", priority: 0})
	e.enqueue(int32(len(e.reqs)-1), true)
	var got []string
	for _, slot := range e.waiting {
		got = append(got, e.reqs[slot].id)
	}
	if diff := cmp.Diff([]string{"urgent", "back", "a", "b", "lazy"}, got); diff != "" {
		t.Fatalf("queue (-want +got):\n%s", diff)
	}
}
