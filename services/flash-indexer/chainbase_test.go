package flashindexer

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/services/servicekit/servicetest"
)

// A query may name an earlier query's chain as its base and send only the
// hashes after it: the answer is the one the whole chain gets, and the
// chain is kept for the next query when the query asks (a session's turn). A base the indexer does not hold (or
// one longer than it holds, or a query past the length limit once
// expanded) is refused; one that keeps none refuses every base.
func TestFindMatchesOnAChainBase(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2, 3, 4, 5))
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 5, 1, 2, 3, 4, 5))
	ctx := context.Background()
	find := func(base *kvv1.ChainBase, hashes ...uint64) (*flashindexv1.FindMatchesResponse, error) {
		return h.client.FindMatches(ctx, &flashindexv1.FindMatchesRequest{
			Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: hashes, Base: base, Keep: true}}})
	}
	first, err := find(nil, 1, 2, 3)
	if err != nil || first.GetChainKept() != 3 {
		t.Fatalf("whole: kept %d, %v", first.GetChainKept(), err)
	}
	onBase, err := find(&kvv1.ChainBase{Key: 3, Blocks: 3}, 4, 5, 6)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := find(nil, 1, 2, 3, 4, 5, 6)
	if err != nil {
		t.Fatal(err)
	}
	if onBase.GetChainKept() != 6 || onBase.GetQueryBlocks() != 6 || !proto.Equal(onBase, whole) {
		t.Fatalf("on its base %v, whole %v", onBase, whole)
	}
	// Not asked to keep it: not kept.
	once, err := h.client.FindMatches(ctx, &flashindexv1.FindMatchesRequest{
		Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: []uint64{1, 2, 3, 4, 5, 6, 7}}}})
	if err != nil || once.GetChainKept() != 0 {
		t.Fatalf("a query that did not ask was kept as %d (%v)", once.GetChainKept(), err)
	}
	if _, err := find(&kvv1.ChainBase{Key: 7, Blocks: 7}); status.Code(err) != codes.NotFound {
		t.Fatalf("the chain of a query that did not ask is held: %v", err)
	}
	for _, b := range []*kvv1.ChainBase{{Key: 99, Blocks: 1}, {Key: 3, Blocks: 4}, {Key: 3, Blocks: 0}} {
		if _, err := find(b, 7); status.Code(err) != codes.NotFound {
			t.Errorf("base %v: %v, want NOT_FOUND", b, err)
		}
	}
	long := make([]uint64, maxQueryBlocks)
	for i := range long {
		long[i] = uint64(100 + i)
	}
	if _, err := find(&kvv1.ChainBase{Key: 6, Blocks: 6}, long...); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a chain past %d blocks once expanded: %v, want INVALID_ARGUMENT", maxQueryBlocks, err)
	}

	none := start(t, servicetest.NewFakeScheduler(w), func(c *Config) { c.ChainCacheHashes = 0 })
	resp, err := none.client.FindMatches(ctx, &flashindexv1.FindMatchesRequest{
		Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: []uint64{1, 2}, Keep: true}}})
	if err != nil || resp.GetChainKept() != 0 {
		t.Fatalf("an indexer that keeps no chains kept %d (%v)", resp.GetChainKept(), err)
	}
}
