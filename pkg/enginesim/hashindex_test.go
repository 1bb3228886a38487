package enginesim

import (
	"math/rand/v2"
	"testing"

	"switchyard.dev/pkg/kv"
)

// TestHashIndexMatchesMap checks the open-addressing table against a Go map
// under random inserts and deletes, with keys drawn from a small range so
// probe runs collide, wrap around the table and get shifted by deletes.
func TestHashIndexMatchesMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		capacity := 1 + rng.IntN(64)
		idx := newHashIndex(capacity)
		ref := map[kv.BlockHash]int32{}
		keySpace := 3 * capacity
		key := func() kv.BlockHash {
			k := kv.BlockHash(rng.IntN(keySpace))
			if seed%2 == 1 {
				k *= 1 << 40 // keys that differ only in high bits
			}
			return k
		}
		for op := range 5000 {
			k := key()
			switch {
			case rng.IntN(2) == 0 && len(ref) < capacity:
				_, had := ref[k]
				if got := idx.put(k, int32(op)); got == had {
					t.Fatalf("seed %d: put(%d) = %v with key present = %v", seed, k, got, had)
				}
				if !had {
					ref[k] = int32(op)
				}
			default:
				_, had := ref[k]
				if got := idx.del(k); got != had {
					t.Fatalf("seed %d: del(%d) = %v, want %v", seed, k, got, had)
				}
				delete(ref, k)
			}
			if idx.len() != len(ref) {
				t.Fatalf("seed %d: len %d, want %d", seed, idx.len(), len(ref))
			}
			if op%97 == 0 {
				for k := range keySpace {
					k := kv.BlockHash(k)
					if seed%2 == 1 {
						k *= 1 << 40
					}
					v, ok := idx.get(k)
					want, wantOK := ref[k]
					if ok != wantOK || (ok && v != want) {
						t.Fatalf("seed %d: get(%d) = %d, %v; want %d, %v", seed, k, v, ok, want, wantOK)
					}
				}
				n := 0
				idx.each(func(k kv.BlockHash, v int32) {
					n++
					if ref[k] != v {
						t.Fatalf("seed %d: each yields %d → %d, want %d", seed, k, v, ref[k])
					}
				})
				if n != len(ref) {
					t.Fatalf("seed %d: each yields %d entries, want %d", seed, n, len(ref))
				}
			}
		}
	}
}
