package basecache

import (
	"errors"
	"slices"
	"testing"
)

func seq(start, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(start + i)
	}
	return out
}

// A session's chains: each turn names the previous one and sends what
// follows, and gets the whole chain back, appended in place after the
// second turn (the first was sent whole, in the request's own array).
func TestChainsExpandOnTheLastKept(t *testing.T) {
	c := NewChains(1 << 20)
	chain := seq(1, 100)
	key := c.Keep(Whole(slices.Clone(chain)))
	if key != 100 {
		t.Fatalf("key %d, want the last hash", key)
	}
	var arrays []*uint64
	for turn := range 4 {
		next := append(slices.Clone(chain), seq(1000*(turn+1), 3)...)
		got, err := c.Expand(key, len(chain), next[len(chain):])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Hashes, next) || cap(got.Hashes) != len(got.Hashes) {
			t.Fatalf("turn %d: %v (cap %d)", turn, got.Hashes[len(chain)-2:], cap(got.Hashes))
		}
		arrays = append(arrays, &got.Hashes[0])
		key, chain = c.Keep(got), next
	}
	for turn := 2; turn < len(arrays); turn++ {
		if arrays[turn] != arrays[1] {
			t.Fatalf("turn %d copied its base", turn)
		}
	}
	// A branch from an earlier chain (cut short) copies, and leaves the
	// chains kept as they were.
	branch, err := c.Expand(100, 50, seq(7000, 2))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(seq(1, 50), seq(7000, 2)...); !slices.Equal(branch.Hashes, want) {
		t.Fatalf("branch %v", branch.Hashes)
	}
	if again, err := c.Expand(key, len(chain), nil); err != nil || !slices.Equal(again.Hashes, chain) {
		t.Fatalf("the latest chain after a branch: %v", err)
	}
}

func TestChainsRefuseWhatTheyDoNotHold(t *testing.T) {
	c := NewChains(10 + chainOverhead)
	key := c.Keep(Whole(seq(1, 8)))
	for _, tc := range []struct {
		name   string
		c      *Chains
		key    uint64
		blocks int
	}{
		{"unknown key", c, 999, 1},
		{"no blocks", c, key, 0},
		{"more blocks than kept", c, key, 9},
		{"a service that keeps none", NewChains(0), key, 1},
	} {
		if _, err := tc.c.Expand(tc.key, tc.blocks, nil); !errors.Is(err, ErrBaseNotHeld) {
			t.Errorf("%s: %v, want ErrBaseNotHeld", tc.name, err)
		}
	}
	if c.Keep(Whole(seq(100, 11))) != 0 || c.Keep(Whole(nil)) != 0 || NewChains(0).Keep(Whole(seq(1, 2))) != 0 {
		t.Fatal("kept a chain longer than the store, an empty one, or one in a store of none")
	}
	// Past the room the least recent goes.
	c.Keep(Whole(seq(200, 4)))
	if _, err := c.Expand(key, 1, nil); !errors.Is(err, ErrBaseNotHeld) || c.Hashes() != 4+chainOverhead {
		t.Fatalf("after a chain that did not fit beside it: %v, %d hashes", err, c.Hashes())
	}
}

// A chain's tag is kept with it and carried by the chains expanded from it.
func TestChainsKeepTheirTag(t *testing.T) {
	c := NewChains(1 << 10)
	ch := Whole(seq(1, 4))
	ch.Tag = 7
	key := c.Keep(ch)
	next, err := c.Expand(key, 4, seq(10, 2))
	if err != nil || next.Tag != 7 {
		t.Fatalf("expanded: tag %d, %v", next.Tag, err)
	}
	next.Tag = 3
	if again, err := c.Expand(c.Keep(next), 6, nil); err != nil || again.Tag != 3 {
		t.Fatalf("kept with a new tag: %d, %v", again.Tag, err)
	}
}
