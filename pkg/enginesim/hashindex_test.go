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

func FuzzParseTableModel(f *testing.F) {
	f.Add([]byte(`{"prefill":[{"x":100,"ms":12},{"x":1000,"ms":30}],"decode":[{"x":0,"ms":6},{"x":1,"ms":30}]}`))
	f.Add([]byte(`{"prefill":[{"x":1,"ms":1}],"decode":[{"x":0.5,"ms":3}],"decode_floor_ms":2}`))
	f.Add([]byte(`{"prefill":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseTableModel(b)
		if err != nil {
			return
		}
		// Any accepted table yields finite, non-negative times.
		for _, n := range []int{0, 1, 100, 10_000, 1 << 20} {
			if d := m.PrefillTime(PrefillBatch{NewTokens: n}); d < 0 {
				t.Fatalf("prefill(%d) = %v", n, d)
			}
		}
		for _, u := range []float64{0, 0.5, 1} {
			if d := m.DecodeTime(DecodeBatch{Requests: 1, KVUsage: u}); d < 0 {
				t.Fatalf("decode(%v) = %v", u, d)
			}
		}
	})
}

func TestHugeTableValuesSaturate(t *testing.T) {
	m, err := ParseTableModel([]byte(`{"prefill":[{"x":0,"ms":0},{"x":1,"ms":1e300}],"decode":[{"x":0,"ms":1e300}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := m.PrefillTime(PrefillBatch{NewTokens: 1 << 20}); d <= 0 {
		t.Fatalf("prefill time %v overflowed", d)
	}
	if d := m.DecodeTime(DecodeBatch{Requests: 1}); d <= 0 {
		t.Fatalf("decode time %v overflowed", d)
	}
}
