package scheduler

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/basecache"
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
