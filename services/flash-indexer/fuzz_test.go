package flashindexer

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/kvpool"
)

// fuzzService is a Service with what the decoders touch: no server, no
// goroutines.
func fuzzService(t testing.TB) *Service {
	cfg := DefaultConfig().withDefaults()
	cfg.ChainCacheHashes = 1 << 12
	s := &Service{cfg: cfg, log: slog.New(slog.DiscardHandler), now: time.Now,
		ix:     flashindex.New(flashindex.Config{MaxBlocks: 1 << 12, MaxPredictedBlocks: 1 << 12}),
		fresh:  flashindex.NewFreshness(cfg.StaleAfter),
		chains: basecache.NewChains(cfg.ChainCacheHashes)}
	m, err := newMetrics(prometheus.NewRegistry(), func(n string) string { return n }, s.ix.Stats,
		func() int { return 0 }, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	s.m = m
	return s
}

// FuzzPoolBatches feeds arbitrary batches of the shared pool's stream
// (what the kv-pool, or anything at its address, sends) through the
// follower into the pool index: nothing may panic, and a batch the follower
// refuses must leave the index answering queries.
func FuzzPoolBatches(f *testing.F) {
	l := kvpool.Layout{TPSize: 2, KeyPrefix: "t"}
	seeds := []*kvpoolv1.PoolEventBatch{
		{Epoch: 3, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 2, Layout: &kvpoolv1.Layout{TpSize: 2, KeyPrefix: "t"},
			ObjectKeys: []string{l.Key(kvpool.Object{Page: 1}), l.Key(kvpool.Object{Page: 1, Part: kvpool.PartV})}}},
		{Epoch: 3, Events: []*kvpoolv1.PoolEvent{
			{Sequence: 3, Type: kvpoolv1.PoolEventType_POOL_EVENT_TYPE_STORED, ObjectKey: l.Key(kvpool.Object{Page: 1, Rank: 1})},
			{Sequence: 4, Type: kvpoolv1.PoolEventType_POOL_EVENT_TYPE_REMOVED, ObjectKey: l.Key(kvpool.Object{Page: 1})},
			{Sequence: 9, Type: 7, ObjectKey: "nonsense"}}},
	}
	for _, b := range seeds {
		data, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := fuzzService(t)
		pf := &poolFollower{s: s,
			events: prometheus.NewCounter(prometheus.CounterOpts{Name: "e"}), snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}),
			gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "g"}), badEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})}
		// Each batch twice: the second is all duplicates, or a gap.
		for range 2 {
			var b kvpoolv1.PoolEventBatch
			if proto.Unmarshal(data, &b) != nil {
				return
			}
			_, _ = pf.apply(&b)
		}
		var m flashindex.Matches
		s.ix.FindMatchesWith(&m, nil, flashindex.FindOptions{Now: time.Now()})
		if pf.pix != nil {
			_ = pf.pix.Stats()
		}
	})
}

// FuzzFindMatchesQuery feeds arbitrary FindMatches requests (the
// scheduler's, or any caller's) through the query decoder and the lookup:
// an error is fine, a panic is not.
func FuzzFindMatchesQuery(f *testing.F) {
	for _, req := range []*flashindexv1.FindMatchesRequest{
		{Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: []uint64{1, 2, 3}, Keep: true}}, IncludeFrequencies: true},
		{Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: []uint64{4}, Base: &kvv1.ChainBase{Key: 3, Blocks: 3}}}},
		{Query: &flashindexv1.FindMatchesRequest_Tokens{Tokens: &flashindexv1.Tokens{TokenIds: []uint32{1, 2, 3, 4, 5}, BlockSize: 2, LoraName: "l"}}, WorkerIds: []string{"w0"}},
		{Query: &flashindexv1.FindMatchesRequest_Tokens{Tokens: &flashindexv1.Tokens{TokenIds: []uint32{1}}}, IncludePredicted: true},
		{},
	} {
		data, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req flashindexv1.FindMatchesRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		s := fuzzService(t)
		for range 2 { // the second may name the first's kept chain
			if _, err := s.FindMatches(t.Context(), &req); err != nil {
				return
			}
		}
	})
}
