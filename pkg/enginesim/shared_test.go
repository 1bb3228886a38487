package enginesim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
)

var _ SharedPool = (*kvpool.Store)(nil)

func newPool(t testing.TB, tp, pages int) *kvpool.Store {
	t.Helper()
	l := kvpool.Layout{TPSize: tp}
	p, err := kvpool.New(kvpool.Config{Layout: l, Capacity: pages * l.ObjectsPerPage()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recordingPool is a shared pool that remembers what was written to it.
type recordingPool struct {
	*kvpool.Store
	puts []kv.BlockHash
}

func (r *recordingPool) Put(h kv.BlockHash) {
	r.puts = append(r.puts, h)
	r.Store.Put(h)
}

// Two engines share a pool: what one evicts, the other loads at the pool's
// bandwidth instead of computing it.
func TestSharedPoolCarriesEvictedBlocksBetweenEngines(t *testing.T) {
	pool := newPool(t, 2, 64)
	a := mustNew(t, Config{WorkerID: "a", BlockSize: 4, NumGPUBlocks: 8, SharedPool: pool})
	b := mustNew(t, Config{WorkerID: "b", BlockSize: 4, NumGPUBlocks: 8, SharedPool: pool})
	prompt := seq(0, 16) // 4 blocks
	fill(t, a, "a1", "s1", prompt)
	fill(t, a, "a2", "s2", seq(1000, 31)) // evicts all of a1's blocks: device → pool
	if st := a.Stats(); st.PoolWrites != 4 || st.Evictions[kv.TierDevice] != 4 {
		t.Fatalf("a wrote %d blocks to the pool (evicted %d), want 4", st.PoolWrites, st.Evictions[kv.TierDevice])
	}
	if err := b.Add(Request{ID: "b1", SessionID: "s1", Prompt: prompt, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	// 3 blocks of 4 tokens × 128 KiB at 25 GB/s, the default pool bandwidth:
	// the request waits for them, then computes its last block.
	bytes := float64(3 * 4 * 131072)
	transfer := time.Duration(bytes / 25e9 * float64(time.Second))
	out, steps := stepLoaded(t, b, transfer, PrefillChunk{NewTokens: 4, PrefixTokens: 12})
	if out.CachedTokens != 12 || out.Usage.CachedByTier[kv.TierShared] != 12 {
		t.Fatalf("pool hit: cached %d, by tier %v; want 12 from the shared pool (steps %v)", out.CachedTokens, out.Usage.CachedByTier, steps)
	}
	if st := b.Stats(); st.TierHitTokens[kv.TierShared] != 12 || st.LoadedBlocks != 3 {
		t.Fatalf("b stats: shared hit tokens %d, loaded %d", st.TierHitTokens[kv.TierShared], st.LoadedBlocks)
	}
}

// A page the pool holds only in part is a miss: the prefix ends there.
func TestSharedPoolPartialPageEndsTheHit(t *testing.T) {
	pool := newPool(t, 2, 64)
	prompt := seq(0, 16)
	hs := Config{BlockSize: 4}.hasherFor(prompt)
	for _, h := range hs {
		pool.Put(h)
	}
	pool.Remove(kvpool.Object{Page: hs[1], Rank: 1, Part: kvpool.PartV})
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 8, SharedPool: pool})
	r := fill(t, e, "r", "s", prompt)
	if got := r.final["r"].Usage.CachedByTier[kv.TierShared]; got != 4 {
		t.Fatalf("pool hit %d tokens, want 4: the second page is partial", got)
	}
}

// Blocks the engine holds itself come from its own tiers: the pool is asked
// only for the run after them.
func TestSharedPoolOnlyFillsWhatTheEngineLacks(t *testing.T) {
	pool := newPool(t, 1, 64)
	prompt := seq(0, 20)
	hs := Config{BlockSize: 4}.hasherFor(prompt)
	e := mustNew(t, Config{BlockSize: 4, NumGPUBlocks: 16, SharedPool: pool})
	fill(t, e, "warm", "s", prompt[:8]) // blocks 0-1 on the device
	for _, h := range hs {
		pool.Put(h)
	}
	before := pool.Stats()
	r := fill(t, e, "r", "s", prompt)
	if u := r.final["r"].Usage; u.CachedByTier[kv.TierDevice] != 8 || u.CachedByTier[kv.TierShared] != 8 {
		t.Fatalf("cached by tier %v, want blocks 0-1 from the device, 2-3 from the pool", u.CachedByTier)
	}
	if st := pool.Stats(); st.PagesAsked-before.PagesAsked != 2 || st.PagesHit-before.PagesHit != 2 {
		t.Fatalf("pool asked for %d pages (hit %d), want only blocks 2-3", st.PagesAsked-before.PagesAsked, st.PagesHit-before.PagesHit)
	}
}

// Random agent workloads with a small shared pool under every tier layout:
// the engine's invariants hold, the index built from its events equals its
// cache, every block written to the pool is one its last local tier just
// evicted, and the pool does serve hits.
func TestRandomWorkloadsWithSharedPool(t *testing.T) {
	configs := map[string]Config{
		"device+pool":      {BlockSize: 4, NumGPUBlocks: 48, MaxNumSeqs: 4, MaxNumBatchedTokens: 64},
		"host+pool":        {BlockSize: 4, NumGPUBlocks: 40, MaxNumSeqs: 3, MaxNumBatchedTokens: 32, HostBlocks: 16},
		"host+disk+pool":   {BlockSize: 4, NumGPUBlocks: 40, MaxNumSeqs: 8, MaxNumBatchedTokens: 48, HostBlocks: 8, DiskBlocks: 12},
		"tiny batch+pool":  {BlockSize: 4, NumGPUBlocks: 32, MaxNumSeqs: 2, MaxNumBatchedTokens: 5, DiskBlocks: 8},
		"odd capacity tp3": {BlockSize: 2, NumGPUBlocks: 64, MaxNumSeqs: 5, MaxNumBatchedTokens: 16},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			seeds := uint64(6)
			if raceEnabled {
				seeds = 2
			}
			var poolHits int64
			for seed := range seeds {
				l := kvpool.Layout{TPSize: 2}
				capacity := 30 * l.ObjectsPerPage()
				if name == "odd capacity tp3" {
					l.TPSize, capacity = 3, 61 // partial pages at every eviction boundary
				}
				store, err := kvpool.New(kvpool.Config{Layout: l, Capacity: capacity})
				if err != nil {
					t.Fatal(err)
				}
				pool := &recordingPool{Store: store}
				c := cfg
				c.SharedPool = pool
				w := newWorkload(t, c, seed, true)
				last := kv.TierDevice
				if c.DiskBlocks > 0 {
					last = kv.TierDisk
				} else if c.HostBlocks > 0 {
					last = kv.TierHost
				}
				var evicted []kv.BlockHash
				w.onEvents = func(evs []kv.Event) {
					for _, ev := range evs {
						if ev.Kind == kv.Removed && ev.Tier == last {
							evicted = append(evicted, ev.Blocks...)
						}
					}
				}
				checkPuts := func(when string) {
					t.Helper()
					slices.Sort(evicted)
					slices.Sort(pool.puts)
					if !slices.Equal(evicted, pool.puts) {
						t.Fatalf("seed %d %s: wrote %v to the pool, last tier evicted %v", seed, when, pool.puts, evicted)
					}
					evicted, pool.puts = evicted[:0], pool.puts[:0]
				}
				for i := range 1500 {
					w.op()
					checkPuts(fmt.Sprintf("op %d", i))
				}
				for i := 0; w.e.HasWork(); i++ {
					if i > 100000 {
						t.Fatal("engine does not drain")
					}
					w.step()
					w.check()
					checkPuts("drain")
				}
				st := w.e.Stats()
				poolHits += st.TierHitTokens[kv.TierShared]
				if st.Tiers[kv.TierDevice].Used != 0 {
					t.Fatalf("idle engine holds %d blocks", st.Tiers[kv.TierDevice].Used)
				}
			}
			if poolHits == 0 {
				t.Fatal("the shared pool never served a hit: the test does not exercise it")
			}
			t.Logf("pool hit tokens over %d seeds: %d", seeds, poolHits)
		})
	}
}
