package flashindex

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"switchyard.dev/pkg/kv"
)

// FuzzApply decodes bytes into a batch of events over a small block forest
// (including nonsense: unknown kinds and tiers, zero hashes, parents that do
// not match) and checks the index against the reference model after each.
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0x10, 0, 5, 0x21, 0, 3, 0x30, 0x41, 1, 2, 0x02, 0x90})
	f.Add([]byte("stored removed cleared and some more bytes to chew on"))
	tree := newBlockTree(rand.New(rand.NewPCG(5, 5)), 64, 2)
	f.Fuzz(func(t *testing.T, data []byte) {
		ix := New(Config{WriteChunk: 2, SweepChunk: 7, MaxBlocks: 1 << 20})
		ref := newRef()
		in := fuzzInput(data)
		for len(in) > 0 {
			h, worker, dp, p, i, j := in.step(tree)
			tier := kv.Tier((h >> 3) & 3)
			var parent kv.BlockHash
			if i > 0 {
				parent = p[i-1]
			}
			var ev kv.Event
			switch (h >> 5) & 7 {
			case 0, 1, 2:
				ev = kv.Event{Kind: kv.Stored, Tier: tier, Parent: parent, Blocks: p[i:j]}
			case 3, 4:
				ev = kv.Event{Kind: kv.Removed, Tier: tier, Blocks: p[i:j]}
			case 5:
				ev = kv.Event{Kind: kv.Cleared}
			case 6:
				ix.RemoveWorker(worker)
				ref.removeWorker(worker)
				continue
			default: // garbage the index must reject or ignore without corrupting itself
				bad := kv.Event{Kind: kv.EventKind(h), Tier: kv.Tier(in.next()), Blocks: p[i:j]}
				if ix.Apply(worker, dp, bad) == nil && (bad.Kind < kv.Stored || bad.Kind > kv.Cleared || !bad.Tier.Valid()) {
					t.Fatalf("accepted %+v", bad)
				}
				continue
			}
			if err := ix.Apply(worker, dp, ev); err != nil {
				t.Fatal(err)
			}
			ref.apply(worker, dp, ev)
		}
		for k := 0; k < len(tree.hashes); k += 7 {
			checkAgainst(t, ix, ref, tree.path(k))
		}
		checkEntries(t, ix, ref)
	})
}

// fuzzInput hands out a fuzz target's bytes one at a time, 0 once they are
// used up.
type fuzzInput []byte

func (in *fuzzInput) next() int {
	if len(*in) == 0 {
		return 0
	}
	b := (*in)[0]
	*in = (*in)[1:]
	return int(b)
}

// step decodes what every step of the fuzz targets starts with: its op byte
// h, the worker and dp rank h's low bits name (the rest are the target's),
// and a run p[i:j] of one of tree's paths.
func (in *fuzzInput) step(tree *blockTree) (h int, worker string, dp uint32, p []kv.BlockHash, i, j int) {
	h = in.next()
	worker = fmt.Sprintf("w%d", h&3)
	dp = uint32(h>>2) & 1
	p = tree.path(in.next() % len(tree.hashes))
	i = in.next() % len(p)
	j = i + 1 + in.next()%(len(p)-i)
	return h, worker, dp, p, i, j
}
