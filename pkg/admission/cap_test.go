package admission

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Against a reference model: a counter and a FIFO.
func TestSessionCapAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		limit := 1 + r.IntN(4)
		c := NewSessionCap(limit)
		holding := map[Key]bool{}
		var queue []Key
		for step := range 500 {
			k := Key{SessionID: fmt.Sprint(r.IntN(12))}
			if r.IntN(2) == 0 {
				want := holding[k]
				if !want && len(holding) < limit && len(queue) == 0 {
					holding[k], want = true, true
				} else if !want && !slices.Contains(queue, k) {
					queue = append(queue, k)
				}
				if got := c.Admit(k); got != want {
					t.Fatalf("seed %d step %d: Admit(%v) = %v, want %v", seed, step, k, got, want)
				}
			} else {
				var want []Key
				if holding[k] {
					delete(holding, k)
					for len(holding) < limit && len(queue) > 0 {
						holding[queue[0]] = true
						want = append(want, queue[0])
						queue = queue[1:]
					}
				} else if i := slices.Index(queue, k); i >= 0 {
					queue = slices.Delete(queue, i, i+1)
				}
				if got := c.Release(k); !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: Release(%v) = %v, want %v", seed, step, k, got, want)
				}
			}
			if c.Holding() != len(holding) || c.Waiting() != len(queue) || c.Holding() > limit {
				t.Fatalf("seed %d step %d: holding %d waiting %d, want %d %d", seed, step, c.Holding(), c.Waiting(), len(holding), len(queue))
			}
		}
	}
}
