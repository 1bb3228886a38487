package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/services/servicekit/servicetest"
)

// A session's routes name the previous route's chain as their base and
// send only the hashes after it: the scheduler expands them (what it
// routes on, predicts and keeps is the whole chain), keeps the chain for
// the next route, and asks the flash indexer on the same base, sending the
// whole chain again when the indexer does not hold it. A base the
// scheduler does not hold is NOT_FOUND.
func TestRouteOnAChainBase(t *testing.T) {
	h := newHarness(t, nil)
	h.index.chains = basecache.NewChains(1 << 20)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20), worker("w2", 1<<20))
	h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w2", DeviceBlocks: 4})

	whole := hashes(14)
	first := routeReq("r1", "s", 10*16)
	resp, err := h.client.Route(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetChainKept() != whole[9] {
		t.Fatalf("chain kept as %d, want the last hash %d", resp.GetChainKept(), whole[9])
	}
	finish := func(id string) {
		if _, err := h.client.FinishRequest(ctx, finishReq(id, resp.GetWorkerId(), "s", 160, 8)); err != nil {
			t.Fatal(err)
		}
	}
	finish("r1")

	// The next turn: ten blocks repeated, four more.
	next := routeReq("r2", "s", 14*16)
	next.Base, next.BlockHashes = &kvv1.ChainBase{Key: resp.GetChainKept(), Blocks: 10}, whole[10:]
	if resp, err = h.client.Route(ctx, next); err != nil {
		t.Fatal(err)
	}
	if resp.GetChainKept() != whole[13] || resp.GetWorkerId() != "w2" {
		t.Fatalf("on its base: kept %d, worker %s", resp.GetChainKept(), resp.GetWorkerId())
	}
	finish("r2")
	h.index.mu.Lock()
	wholes, based := slices.Clone(h.index.wholes), h.index.based
	predicted := slices.Clone(h.index.predicted)
	h.index.mu.Unlock()
	if len(wholes) != 2 || !slices.Equal(wholes[1], whole) || based != 1 {
		t.Fatalf("the indexer saw %d queries, %d on a base; the second's chain %v", len(wholes), based, wholes[len(wholes)-1])
	}
	if p := predicted[len(predicted)-1]; p.GetFirstBlock() != 4 || !slices.Equal(p.GetBlockHashes(), whole[4:]) {
		t.Fatalf("predicted from block %d: %v", p.GetFirstBlock(), p.GetBlockHashes())
	}

	// The indexer forgot (restarted): it is asked again with the whole chain.
	h.index.mu.Lock()
	h.index.chains = basecache.NewChains(1 << 20)
	h.index.mu.Unlock()
	third := routeReq("r3", "s", 14*16)
	third.Base, third.BlockHashes = &kvv1.ChainBase{Key: whole[13], Blocks: 14}, nil
	if resp, err = h.client.Route(ctx, third); err != nil || resp.GetWorkerId() != "w2" {
		t.Fatalf("with the indexer's base forgotten: %v, %v", resp, err)
	}
	finish("r3")
	m := h.svc.metrics.chainBases
	for _, c := range []struct {
		hop, outcome string
		want         float64
	}{{"route", "held", 2}, {"route", "not_held", 0}, {"find_matches", "held", 1}, {"find_matches", "not_held", 1}} {
		if got := testutil.ToFloat64(m.WithLabelValues(c.hop, c.outcome)); got != c.want {
			t.Errorf("chain_bases_total{hop=%s,outcome=%s} = %v, want %v", c.hop, c.outcome, got, c.want)
		}
	}

	// A base this scheduler does not hold, or one longer than it holds.
	for _, b := range []*kvv1.ChainBase{{Key: 42, Blocks: 1}, {Key: whole[13], Blocks: 15}} {
		r := routeReq("r4", "s", 16*16)
		r.Base, r.BlockHashes = b, hashes(2)
		if _, err := h.client.Route(ctx, r); status.Code(err) != codes.NotFound {
			t.Fatalf("base %v: %v, want NOT_FOUND", b, err)
		}
	}
}

// twoIndexers has h's scheduler ask two fake flash indexers that keep
// chains (the first the harness's own).
func twoIndexers(t *testing.T, h *harness) (*fakeIndex, *fakeIndex) {
	t.Helper()
	a, b := h.index, &fakeIndex{}
	for _, f := range []*fakeIndex{a, b} {
		f.chains = basecache.NewChains(1 << 20)
	}
	conn := servicetest.ServeBufconn(t, func(g *grpc.Server) { flashindexv1.RegisterFlashIndexerServiceServer(g, b) })
	x := &indexers{list: []*indexer{h.svc.index.list[0], {addr: "b", client: flashindexv1.NewFlashIndexerServiceClient(conn)}}}
	x.list[1].ready.Store(true)
	h.svc.index = x
	return a, b
}

func (f *fakeIndex) counts() (queries, based int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries, f.based
}

// With two flash indexers a session's lookups go to the one that kept its
// previous chain, on that chain; the one that did not is sent the whole
// chain (it would not know the base). An indexer that answers NOT_FOUND
// for a base is asked again whole, not passed over.
func TestChainBasesWithTwoIndexers(t *testing.T) {
	h := newHarness(t, nil)
	a, b := twoIndexers(t, h)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w1", DeviceBlocks: 4})

	// turn routes the session's next turn, n blocks, on the chain kept for
	// its previous one (held blocks of it).
	var key uint64
	held := 0
	turn := func(id string, n int) {
		t.Helper()
		r := routeReq(id, "s", n*16)
		if key != 0 {
			r.Base, r.BlockHashes = &kvv1.ChainBase{Key: key, Blocks: uint32(held)}, r.BlockHashes[held:]
		}
		resp, err := h.client.Route(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.client.FinishRequest(ctx, finishReq(id, "w1", "s", n*16, 4)); err != nil {
			t.Fatal(err)
		}
		key, held = resp.GetChainKept(), n
	}
	turn("r1", 8)
	qa, _ := a.counts()
	qb, _ := b.counts()
	first := a // the indexer the session's hash picked
	if qb == 1 {
		first = b
	}
	if qa+qb != 1 {
		t.Fatalf("the first lookup went to %d indexers", qa+qb)
	}
	turn("r2", 10)
	turn("r3", 12)
	if q, based := first.counts(); q != 3 || based != 2 {
		t.Fatalf("the session's indexer was asked %d times, %d on a base; want 3 and 2", q, based)
	}
	// The session's indexer restarts: it answers NOT_FOUND and is asked
	// again whole, once; the next turn is on a base again.
	first.mu.Lock()
	first.chains = basecache.NewChains(1 << 20)
	first.mu.Unlock()
	turn("r4", 14)
	turn("r5", 16)
	if q, based := first.counts(); q != 6 || based != 4 {
		t.Fatalf("after its restart the session's indexer was asked %d times, %d on a base; want 6 and 4", q, based)
	}
	other := a
	if first == a {
		other = b
	}
	if q, _ := other.counts(); q != 0 {
		t.Fatalf("the other indexer was asked %d times", q)
	}
	// The session's indexer is down: the other is asked, with the whole
	// chain, and keeps it; the next turn goes to it on that chain.
	first.set(true)
	turn("r6", 18)
	turn("r7", 20)
	if q, based := other.counts(); q != 2 || based != 1 {
		t.Fatalf("with the session's indexer down the other was asked %d times, %d on a base; want 2 and 1", q, based)
	}
	other.mu.Lock()
	wholes := slices.Clone(other.wholes)
	other.mu.Unlock()
	if len(wholes) != 2 || !slices.Equal(wholes[0], hashes(18)) || !slices.Equal(wholes[1], hashes(20)) {
		t.Fatalf("the other indexer answered %d lookups, want the whole chains of 18 and 20 blocks", len(wholes))
	}
	// The session's first indexer is back: the session's lookups stay with
	// the one that holds its chain.
	firstAsked, _ := first.counts()
	first.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w1", DeviceBlocks: 4})
	turn("r8", 22)
	if q, _ := first.counts(); q != firstAsked {
		t.Fatalf("the first indexer, back, was asked %d more times", q-firstAsked)
	}
	if q, based := other.counts(); q != 3 || based != 2 {
		t.Fatalf("the indexer holding the chain was asked %d times, %d on a base; want 3 and 2", q, based)
	}
}

// Chains are kept only for a session's turns that are not its last: the
// others are never named again.
func TestChainsKeptOnlyForASessionsNextTurn(t *testing.T) {
	h := newHarness(t, nil)
	h.index.chains = basecache.NewChains(1 << 20)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	final := routeReq("r2", "s", 160)
	final.Agent.SessionFinal = true
	for _, r := range []*schedulerv1.RouteRequest{routeReq("r1", "", 160), final} {
		resp, err := h.client.Route(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetChainKept() != 0 || h.svc.chains.Hashes() != 0 || h.index.chains.Hashes() != 0 {
			t.Fatalf("%s: kept as %d; the scheduler holds %d hashes, the indexer %d", r.GetRequestId(), resp.GetChainKept(), h.svc.chains.Hashes(), h.index.chains.Hashes())
		}
	}
}

// Sessions' first lookups spread over the indexers.
func TestSessionsSpreadOverIndexers(t *testing.T) {
	x := &indexers{list: make([]*indexer, 3)}
	seen := map[int]int{}
	for i := range 300 {
		seen[x.sessionIndexer(&agentv1.AgentContext{SessionId: fmt.Sprint("s-", i), Tenant: "t"})]++
	}
	if len(seen) != 3 || seen[0] < 50 || seen[1] < 50 || seen[2] < 50 {
		t.Fatalf("300 sessions' indexers: %v", seen)
	}
	if x.sessionIndexer(&agentv1.AgentContext{}) != -1 {
		t.Fatal("a lookup without a session has an indexer of its own")
	}
}

// A turn that waited for admission looks its chain up again: the indexer
// that kept it at the first lookup is named that very chain as the base,
// with no hashes, so that it does not count the chain twice.
func TestChainLookupAfterAnAdmissionWait(t *testing.T) {
	h := newHarness(t, sessionAwareThunderAgent)
	h.index.chains = basecache.NewChains(1 << 20)
	pausedSetup(t, h)
	ctx := context.Background()
	first := hashes(2_000 / 16)
	r := routeReq("s2", "small", 2_100)
	whole := r.GetBlockHashes()
	r.Base, r.BlockHashes = &kvv1.ChainBase{Key: first[len(first)-1], Blocks: uint32(len(first))}, whole[len(first):]
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Route(ctx, r)
		done <- err
	}()
	key := admission.Key{Tenant: "t", SessionID: "small"}
	servicetest.Eventually(t, "the paused program's turn to wait", func() bool { return h.waiting(key) != 0 })
	h.clock.Advance(3100 * time.Millisecond)
	h.svc.tick(context.Background())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.index.mu.Lock()
	asked := slices.Clone(h.index.asked)
	h.index.mu.Unlock()
	before, after := asked[len(asked)-2].GetHashes(), asked[len(asked)-1].GetHashes()
	if before.GetBase().GetKey() != first[len(first)-1] || len(before.GetBlockHashes()) != len(whole)-len(first) {
		t.Fatalf("the first lookup: base %v, %d hashes", before.GetBase(), len(before.GetBlockHashes()))
	}
	if after.GetBase().GetKey() != whole[len(whole)-1] || int(after.GetBase().GetBlocks()) != len(whole) || len(after.GetBlockHashes()) != 0 || !after.GetKeep() {
		t.Fatalf("the lookup after the wait: base %v, %d hashes, keep %v", after.GetBase(), len(after.GetBlockHashes()), after.GetKeep())
	}
}

// A route that made no lookup (a policy without KV) tags its chain with no
// indexer: the next turn names no base to the indexers, though the
// scheduler's buffers served a lookup before. Nor does a chain an indexer
// answered without keeping.
func TestChainTagOnlyFromAnIndexerThatKeptIt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(h *harness) (policy string)
	}{
		{"no lookup", func(h *harness) string {
			h.index.chains = basecache.NewChains(1 << 20)
			if _, err := h.client.Route(context.Background(), routeReq("other", "another-session", 160)); err != nil {
				t.Fatal(err) // a lookup, kept and tagged, before
			}
			return "round_robin"
		}},
		{"indexer keeps none", func(h *harness) string { h.index.chains = nil; return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.register(t, worker("w1", 1<<20))
			policy := tc.setup(h)
			ctx := context.Background()
			first := routeReq("r1", "s", 10*16)
			first.Policy = policy
			resp, err := h.client.Route(ctx, first)
			if err != nil {
				t.Fatal(err)
			}
			next := routeReq("r2", "s", 12*16)
			next.Base, next.BlockHashes = &kvv1.ChainBase{Key: resp.GetChainKept(), Blocks: 10}, next.GetBlockHashes()[10:]
			if _, err := h.client.Route(ctx, next); err != nil {
				t.Fatal(err)
			}
			if _, based := h.index.counts(); based != 0 {
				t.Fatalf("%d lookups named a base the indexer never kept", based)
			}
		})
	}
}
