package flashindex

import (
	"math/rand/v2"
	"testing"

	"switchyard.dev/pkg/kv"
)

// TestBlockTableMatchesMap churns the table against a Go map, with small
// clustered keys (not uniform hashes) and random ones.
func TestBlockTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ix := New(Config{})
	ref := map[kv.BlockHash]uint32{}
	for i := 0; i < 200000; i++ {
		var k kv.BlockHash
		if rng.IntN(2) == 0 {
			k = kv.BlockHash(uint64(rng.IntN(4))<<32 | uint64(1+rng.IntN(3000)))
		} else {
			k = kv.BlockHash(rng.Uint64() | 1)
		}
		_, present := ref[k]
		switch rng.IntN(3) {
		case 0, 1:
			if !present {
				ref[k] = ix.newNode(k)
			}
		default:
			if present {
				ix.ids.del(tagOf(k), ref[k], 0)
				delete(ref, k)
			}
		}
		if i%5000 == 0 {
			if ix.ids.len() != len(ref) {
				t.Fatalf("len %d, want %d", ix.ids.len(), len(ref))
			}
			for rk, rv := range ref {
				if v, ok := ix.ids.get(rk); !ok || v != rv {
					t.Fatalf("get(%d) = %d,%v want %d", rk, v, ok, rv)
				}
			}
		}
	}
}
