package engineshim

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// fakePool serves the two calls a shim makes from a real kvpool.Store.
type fakePool struct {
	kvpoolv1.UnimplementedKvPoolServiceServer
	mu    sync.Mutex
	store *kvpool.Store
}

func (f *fakePool) PutPages(_ context.Context, req *kvpoolv1.PutPagesRequest) (*kvpoolv1.PutPagesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range req.GetPageHashes() {
		f.store.Put(kv.BlockHash(h))
	}
	return &kvpoolv1.PutPagesResponse{Sequence: f.store.Seq()}, nil
}

func (f *fakePool) GetPrefix(_ context.Context, req *kvpoolv1.GetPrefixRequest) (*kvpoolv1.GetPrefixResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs := make([]kv.BlockHash, len(req.GetPageHashes()))
	for i, h := range req.GetPageHashes() {
		hs[i] = kv.BlockHash(h)
	}
	return &kvpoolv1.GetPrefixResponse{Pages: uint32(f.store.Get(hs))}, nil
}

func (f *fakePool) has(hs []uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range hs {
		if !f.store.Contains(kv.BlockHash(h)) {
			return false
		}
	}
	return true
}

// What one shim's engine evicts, another shim's engine loads from the pool.
func TestSharedPoolBetweenShims(t *testing.T) {
	store, err := kvpool.New(kvpool.Config{Capacity: 1024})
	if err != nil {
		t.Fatal(err)
	}
	pool := &fakePool{store: store}
	addr := servicetest.Serve(t, func(g *grpc.Server) { kvpoolv1.RegisterKvPoolServiceServer(g, pool) })
	cfg := testConfig()
	cfg.NumGPUBlocks = 16 // 256 tokens: a second prompt evicts the first
	cfg.PoolAddr = addr
	a, b := start(t, cfg), start(t, cfg)

	req := func(id string, prompt []uint32) *enginev1.GenerateRequest {
		return &enginev1.GenerateRequest{RequestId: id, TokenIds: prompt,
			BlockHashes: uint64sOf(kvhash.New(16, "", "").Blocks(prompt)),
			Sampling:    &enginev1.SamplingParams{MaxTokens: 2, IgnoreEos: true}}
	}
	first := seq(10, 100)
	generate(t, a.client, req("a1", first))
	generate(t, a.client, req("a2", seq(5000, 240))) // takes every block
	hs := uint64sOf(kvhash.New(16, "", "").Blocks(first))
	servicetest.Eventually(t, "the first prompt's blocks to reach the pool", func() bool { return pool.has(hs) })
	g := generate(t, b.client, req("b1", first))
	if got := g.result.GetUsage().GetCachedTokens(); got != 96 {
		t.Fatalf("the other shim served %d cached tokens, want 96 (6 blocks) from the pool", got)
	}
}

// A pool that does not answer is a miss: requests still complete.
func TestUnreachablePoolIsAMiss(t *testing.T) {
	addr := servicetest.FreeAddr(t) // nothing listens there
	cfg := testConfig()
	cfg.PoolAddr, cfg.PoolTimeout = addr, 20*time.Millisecond
	h := start(t, cfg)
	g := generate(t, h.client, &enginev1.GenerateRequest{RequestId: "r", TokenIds: seq(1, 64),
		Sampling: &enginev1.SamplingParams{MaxTokens: 3, IgnoreEos: true}})
	if len(g.tokens) != 3 || h.svc.pool.readFailures.Load() == 0 {
		t.Fatalf("tokens %d, read failures %d", len(g.tokens), h.svc.pool.readFailures.Load())
	}
}

// A pool timeout of 0 or less would give every call a deadline already
// past, leaving the shim without its pool in silence: it is refused.
func TestPoolTimeoutMustBePositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		srv, err := servicekit.New(servicekit.Options{Name: "engine-shim", GRPCAddr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.PoolAddr, cfg.PoolTimeout = servicetest.FreeAddr(t), d
		_, err = New(cfg, srv)
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "--pool-timeout") {
			t.Errorf("--pool-timeout %v: %v, want refused naming the flag", d, err)
		}
	}
}
