package engineshim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/kvhash"
)

// A turn that names the previous turn's prompt as its base and sends only
// what it adds is answered exactly as the same turn sent whole, by a shim
// in the same state.
func TestPromptBaseAnswersAsTheWholePrompt(t *testing.T) {
	h := kvhash.New(16, "", "")
	agent := &agentv1.AgentContext{SessionId: "sess-1"}
	prompt := seq(10, 100) // 6 full blocks and 4 tokens
	first := func(shim *harness) generated {
		return generate(t, shim.client, &enginev1.GenerateRequest{
			RequestId: "turn-1", Agent: agent, TokenIds: prompt, BlockHashes: uint64sOf(h.Blocks(prompt)),
			Sampling: &enginev1.SamplingParams{MaxTokens: 12, IgnoreEos: true},
		})
	}
	delta, whole := start(t, testConfig()), start(t, testConfig())
	g1 := first(delta)
	first(whole)
	hashes := uint64sOf(h.Blocks(prompt))
	if got := g1.result.GetPromptKept(); got != hashes[len(hashes)-1] {
		t.Fatalf("prompt_kept %016x, want the last full block's hash %016x", got, hashes[len(hashes)-1])
	}

	prompt2 := append(append(slices.Clone(prompt), g1.tokens...), seq(900, 40)...)
	hashes2 := uint64sOf(h.Blocks(prompt2))
	turn2 := func() *enginev1.GenerateRequest {
		return &enginev1.GenerateRequest{RequestId: "turn-2", Agent: agent, TokenIds: prompt2, BlockHashes: hashes2,
			Sampling: &enginev1.SamplingParams{MaxTokens: 20, IgnoreEos: true}}
	}
	want := generate(t, whole.client, turn2())
	req := turn2()
	req.Base = &enginev1.PromptBase{Key: g1.result.GetPromptKept(), Blocks: 5} // fewer than it holds
	req.TokenIds, req.BlockHashes = prompt2[5*16:], hashes2[5:]
	got := generate(t, delta.client, req)
	if !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("with a base the answer is %v, whole %v", got.tokens, want.tokens)
	}
	if gu, wu := got.result.GetUsage(), want.result.GetUsage(); gu.GetPromptTokens() != uint32(len(prompt2)) ||
		gu.GetPromptTokens() != wu.GetPromptTokens() || gu.GetCachedTokens() != wu.GetCachedTokens() {
		t.Fatalf("usage with a base %v, whole %v", gu, wu)
	}
	if got.result.GetPromptKept() != hashes2[len(hashes2)-1] || want.result.GetPromptKept() != got.result.GetPromptKept() {
		t.Fatalf("turn 2 kept %016x (whole: %016x), want %016x", got.result.GetPromptKept(), want.result.GetPromptKept(), hashes2[len(hashes2)-1])
	}
	// The base itself was not changed by the turn built on it.
	req = turn2()
	req.RequestId = "turn-2b"
	req.Base = &enginev1.PromptBase{Key: g1.result.GetPromptKept(), Blocks: 6}
	req.TokenIds, req.BlockHashes = prompt2[6*16:], hashes2[6:]
	if g := generate(t, delta.client, req); g.result.GetUsage().GetPromptTokens() != uint32(len(prompt2)) {
		t.Fatalf("a second turn on the same base: usage %v", g.result.GetUsage())
	}
}

func TestPromptBaseNotHeldIsNotFound(t *testing.T) {
	h := kvhash.New(16, "", "")
	shim := start(t, testConfig())
	prompt := seq(10, 64)
	g := generate(t, shim.client, &enginev1.GenerateRequest{
		RequestId: "turn-1", TokenIds: prompt, BlockHashes: uint64sOf(h.Blocks(prompt)), CacheSalt: "acme",
		Sampling: &enginev1.SamplingParams{MaxTokens: 2, IgnoreEos: true},
	})
	key := g.result.GetPromptKept()
	if key == 0 {
		t.Fatal("the prompt was not kept")
	}
	for _, tc := range []struct {
		name string
		base *enginev1.PromptBase
		salt string
	}{
		{"unknown key", &enginev1.PromptBase{Key: key ^ 1, Blocks: 1}, "acme"},
		{"another tenant's", &enginev1.PromptBase{Key: key, Blocks: 1}, "bravo"},
		{"no blocks", &enginev1.PromptBase{Key: key, Blocks: 0}, "acme"},
		{"more blocks than kept", &enginev1.PromptBase{Key: key, Blocks: 5}, "acme"},
	} {
		stream, err := shim.client.Generate(context.Background(), &enginev1.GenerateRequest{
			RequestId: "turn-2-" + tc.name, TokenIds: seq(500, 8), Base: tc.base, CacheSalt: tc.salt,
			Sampling: &enginev1.SamplingParams{MaxTokens: 2},
		})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s: %v, want NOT_FOUND", tc.name, err)
		}
	}
	// No hashes, nothing to name the prompt by: not kept.
	g = generate(t, shim.client, &enginev1.GenerateRequest{RequestId: "no-hashes", TokenIds: seq(3000, 64),
		Sampling: &enginev1.SamplingParams{MaxTokens: 2, IgnoreEos: true}})
	if g.result.GetPromptKept() != 0 {
		t.Fatalf("a prompt without block hashes was kept as %016x", g.result.GetPromptKept())
	}
}

func TestPromptsForgetTheLeastRecentPastTheirTokens(t *testing.T) {
	h := kvhash.New(4, "", "")
	p := newPrompts(4, 20)
	req := func(start int) *enginev1.GenerateRequest {
		ids := seq(start, 8)
		return &enginev1.GenerateRequest{TokenIds: ids, BlockHashes: uint64sOf(h.Blocks(ids))}
	}
	a, b := p.keep(req(0), whole{}), p.keep(req(100), whole{})
	if _, err := p.expand(&enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: a, Blocks: 1}}); err != nil { // a is now the most recent
		t.Fatal("a was not held")
	}
	c := p.keep(req(200), whole{}) // 24 tokens > 20: b goes
	for key, held := range map[uint64]bool{a: true, b: false, c: true} {
		_, err := p.expand(&enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: key, Blocks: 2}})
		if (err == nil) != held || (err != nil && !errors.Is(err, errBaseNotHeld)) {
			t.Errorf("key %016x: %v, held %v", key, err, held)
		}
	}
	if p.kept.Used() != 16 {
		t.Fatalf("%d tokens held, want 16", p.kept.Used())
	}
	if newPrompts(16, 0) != nil || newPrompts(16, 0).keep(req(0), whole{}) != 0 {
		t.Fatal("a cache of 0 tokens keeps prompts")
	}
	var none *prompts
	if _, err := none.expand(&enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: a, Blocks: 1}}); !errors.Is(err, errBaseNotHeld) {
		t.Fatalf("without a cache a base is %v", err)
	}
}

// Three sessions take turns on a shim with room for four of their prompts:
// each turn is built on the session's previous prompt, which it supersedes,
// so every session's latest prompt is still held when its next turn comes.
// (With the base left at the front by its use, each session held two
// prompts and the third session's only one was forgotten.)
func TestPromptsForgetSupersededBasesFirst(t *testing.T) {
	const block, perPrompt = 4, 8
	h := kvhash.New(block, "", "")
	p := newPrompts(block, 4*perPrompt)
	latest := map[string]uint64{}
	turn := func(session string, start int) error {
		ids := seq(start, perPrompt)
		req := &enginev1.GenerateRequest{TokenIds: ids[perPrompt/2:], BlockHashes: uint64sOf(h.Blocks(ids))[1:]}
		var w whole
		if builtOn := latest[session]; builtOn != 0 {
			req.Base = &enginev1.PromptBase{Key: builtOn, Blocks: 1}
			var err error
			if w, err = p.expand(req); err != nil {
				return fmt.Errorf("session %s, turn from %d: %w", session, start, err)
			}
		} else {
			req.TokenIds, req.BlockHashes = ids, uint64sOf(h.Blocks(ids))
		}
		latest[session] = p.keep(req, w)
		return nil
	}
	for round := range 3 {
		for i, session := range []string{"a", "b", "c"} {
			// Each prompt is new tokens: the expanded request is the base's
			// first block and the request's own rest, which is all the
			// order checked here needs.
			if err := turn(session, 1000*i+10*round); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A prompt two sessions both kept (the same bytes: fanned-out sub-agents,
// best-of-n) is superseded for one of them only: it keeps its place for
// the other, which names it next.
func TestPromptsKeepABaseAnotherSessionHolds(t *testing.T) {
	h := kvhash.New(4, "", "")
	p := newPrompts(4, 24) // three prompts of 8 tokens
	req := func(start int) *enginev1.GenerateRequest {
		ids := seq(start, 8)
		return &enginev1.GenerateRequest{TokenIds: ids, BlockHashes: uint64sOf(h.Blocks(ids))}
	}
	shared := p.keep(req(0), whole{}) // session x's prompt
	p.keep(req(0), whole{})           // session y's, the same
	p.keep(req(100), whole{})         // another session's
	x2 := &enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: shared, Blocks: 1}, TokenIds: seq(204, 4)}
	w, err := p.expand(x2)
	if err != nil {
		t.Fatal(err)
	}
	x2.BlockHashes = uint64sOf(h.Blocks(x2.TokenIds))
	p.keep(x2, w)             // x moves on
	p.keep(req(300), whole{}) // one more prompt: the least recent goes
	if _, err := p.expand(&enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: shared, Blocks: 2}}); err != nil {
		t.Fatalf("session y's prompt, which x's turn built on: %v", err)
	}
}

// Through the service: a turn sent on a base supersedes it in the shim's
// cache, so a fourth prompt pushes out that base rather than another
// session's only one (room for three here).
func TestGenerateOnABaseSupersedesIt(t *testing.T) {
	h := kvhash.New(16, "", "")
	cfg := testConfig()
	cfg.PromptCacheTokens = 3 * 64
	shim := start(t, cfg)
	whole := func(id string, prompt []uint32) uint64 {
		g := generate(t, shim.client, &enginev1.GenerateRequest{RequestId: id, TokenIds: prompt, BlockHashes: uint64sOf(h.Blocks(prompt)),
			Sampling: &enginev1.SamplingParams{MaxTokens: 1, IgnoreEos: true}})
		return g.result.GetPromptKept()
	}
	a1 := seq(10, 48)
	keyA := whole("a-1", a1)
	keyB := whole("b-1", seq(1000, 48))
	a2 := append(slices.Clone(a1), seq(500, 16)...) // a's next turn: a1 and one more block
	hashes := uint64sOf(h.Blocks(a2))
	generate(t, shim.client, &enginev1.GenerateRequest{RequestId: "a-2", Base: &enginev1.PromptBase{Key: keyA, Blocks: 3},
		TokenIds: a2[48:], BlockHashes: hashes[3:], Sampling: &enginev1.SamplingParams{MaxTokens: 1, IgnoreEos: true}})
	whole("c-1", seq(2000, 48)) // past the room: a-1, superseded, goes
	for key, held := range map[uint64]bool{keyA: false, keyB: true} {
		stream, err := shim.client.Generate(context.Background(), &enginev1.GenerateRequest{RequestId: "probe",
			Base: &enginev1.PromptBase{Key: key, Blocks: 1}, TokenIds: seq(3000, 4), Sampling: &enginev1.SamplingParams{MaxTokens: 1}})
		if err == nil {
			_, err = stream.Recv()
		}
		if got := status.Code(err) != codes.NotFound; got != held {
			t.Errorf("prompt %016x held %v (%v), want %v", key, got, err, held)
		}
	}
}

// A turn that adds less than a block to its base keeps the base's own key:
// it is no second holder, so the next turn built on it supersedes it.
func TestPromptsCountATurnOnItsOwnBaseOnce(t *testing.T) {
	h := kvhash.New(4, "", "")
	p := newPrompts(4, 28)
	kept := func(start, n int) *enginev1.GenerateRequest {
		ids := seq(start, n)
		return &enginev1.GenerateRequest{TokenIds: ids, BlockHashes: uint64sOf(h.Blocks(ids))}
	}
	// on is a turn on base, kept.
	on := func(base uint64, blocks int, own []uint32) uint64 {
		r := &enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: base, Blocks: uint32(blocks)}, TokenIds: own}
		w, err := p.expand(r)
		if err != nil {
			t.Fatal(err)
		}
		r.BlockHashes = uint64sOf(h.Blocks(r.TokenIds))
		return p.keep(r, w)
	}
	a := p.keep(kept(0, 8), whole{})
	b := p.keep(kept(100, 8), whole{})
	if again := on(a, 2, nil); again != a { // the same prompt once more
		t.Fatalf("kept as %016x, want %016x", again, a)
	}
	on(a, 2, seq(500, 4))         // a's next turn
	p.keep(kept(200, 8), whole{}) // past the room: a, superseded, goes
	if _, err := p.expand(&enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: b, Blocks: 2}}); err != nil {
		t.Fatalf("b, the only prompt of its session: %v", err)
	}
}

// A session's next turn appends its tokens and hashes after its base's in
// the base's arrays, and the request and the kept prompts are views that
// no later turn writes into.
func TestPromptsAppendInPlace(t *testing.T) {
	const block = 4
	h := kvhash.New(block, "", "")
	p := newPrompts(block, 1<<20)
	first := seq(0, 10) // two full blocks and a partial one
	key := p.keep(&enginev1.GenerateRequest{TokenIds: first, BlockHashes: uint64sOf(h.Blocks(first))}, whole{})
	prompt := first
	var arrays [][2]any
	for turn := range 5 {
		next := append(slices.Clone(prompt), seq(100*(turn+1), 7)...)
		n := len(prompt) / block
		req := &enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: key, Blocks: uint32(n)},
			TokenIds: next[n*block:], BlockHashes: uint64sOf(h.Blocks(next))[n:]}
		w, err := p.expand(req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(req.TokenIds, next) || !slices.Equal(req.BlockHashes, uint64sOf(h.Blocks(next))) {
			t.Fatalf("turn %d: the whole prompt is wrong", turn)
		}
		if cap(req.TokenIds) != len(req.TokenIds) || cap(req.BlockHashes) != len(req.BlockHashes) {
			t.Fatalf("turn %d: the request's views are not capped", turn)
		}
		arrays = append(arrays, [2]any{&w.ids[0], &w.hashes[0]})
		key = p.keep(req, w)
		prompt = next
	}
	// The first turn copied the prompt sent whole (its arrays are the
	// request's own); every later one appended after its base, its tokens
	// and its hashes.
	for turn := 2; turn < len(arrays); turn++ {
		if arrays[turn][0] != arrays[1][0] || arrays[turn][1] != arrays[1][1] {
			t.Fatalf("turn %d copied its base's tokens (%v) or hashes (%v)", turn, arrays[turn][0] != arrays[1][0], arrays[turn][1] != arrays[1][1])
		}
	}
}

// Turns built on any earlier kept prompt, at any block, repeating its tail
// or not, get the prompt their sender meant, and no prompt handed out or
// kept before changes (with and without -race: branches are taken at once
// from several goroutines).
func TestPromptsBranchesKeepEveryPrompt(t *testing.T) {
	const block = 4
	h := kvhash.New(block, "", "")
	p := newPrompts(block, 1<<24)
	type made struct {
		key    uint64
		prompt []uint32
		req    *enginev1.GenerateRequest // as expand left it
		array  *uint32                   // of the prompt kept
	}
	root := seq(0, 9)
	pool := []made{{key: p.keep(&enginev1.GenerateRequest{TokenIds: root, BlockHashes: uint64sOf(h.Blocks(root))}, whole{}), prompt: root, array: &root[0]}}
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	inPlace, copies := 0, 0
	for round := range 60 {
		var wg sync.WaitGroup
		results := make([]made, 4)
		for i := range results {
			from := pool[rng.IntN(len(pool))]
			n := 1 + rng.IntN(len(from.prompt)/block)
			next := slices.Clone(from.prompt[:n*block])
			if rng.IntN(2) == 0 { // repeat the base's tail, as a session's next turn does
				next = append(next, from.prompt[n*block:]...)
			}
			next = append(next, seq(1000*round+100*i, 1+rng.IntN(9))...)
			wg.Go(func() {
				req := &enginev1.GenerateRequest{Base: &enginev1.PromptBase{Key: from.key, Blocks: uint32(n)},
					TokenIds: next[n*block:], BlockHashes: uint64sOf(h.Blocks(next))[n:]}
				w, err := p.expand(req)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if &w.ids[0] == from.array {
					inPlace++
				} else {
					copies++
				}
				mu.Unlock()
				results[i] = made{key: p.keep(req, w), prompt: next, req: req, array: &w.ids[0]}
			})
		}
		wg.Wait()
		pool = append(pool, results...)
		for k, m := range pool {
			if m.req != nil && (!slices.Equal(m.req.TokenIds, m.prompt) || !slices.Equal(m.req.BlockHashes, uint64sOf(h.Blocks(m.prompt)))) {
				t.Fatalf("round %d: turn %d's prompt changed or was wrong", round, k)
			}
			// The key names the full blocks (a later prompt with the same
			// ones and another partial block replaces it).
			full := len(m.prompt) / block * block
			if _, err := p.kept.Get(m.key, func(k *keptPrompt) error {
				if !slices.Equal(k.tokenIDs[:full], m.prompt[:full]) || !slices.Equal(k.hashes, uint64sOf(h.Blocks(k.tokenIDs))) {
					return fmt.Errorf("kept as %v, hashes %v", k.tokenIDs, k.hashes)
				}
				return nil
			}); err != nil {
				t.Fatalf("round %d: turn %d's prompt: %v", round, k, err)
			}
		}
	}
	t.Logf("%d turns appended in place, %d copied", inPlace, copies)
	if inPlace == 0 || copies == 0 {
		t.Fatal("the test did not take both paths")
	}
}
