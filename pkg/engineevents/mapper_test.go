package engineevents

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// engineStores splits tokens into engine blocks of ebs tokens, published as
// chained BlockStored events of up to perEvent blocks each (hash = block
// index + base, so they are opaque to the mapper).
func engineStores(tokens []uint32, ebs, perEvent int, base uint64, lora, salt string) []Event {
	n := len(tokens) / ebs
	var out []Event
	for i := 0; i < n; i += perEvent {
		j := min(i+perEvent, n)
		ev := Event{Type: BlockStored, BlockSize: ebs, Tokens: tokens[i*ebs : j*ebs], LoraName: lora}
		for k := i; k < j; k++ {
			ev.Hashes = append(ev.Hashes, base+uint64(k))
		}
		if i > 0 {
			ev.Parent, ev.HasParent = base+uint64(i-1), true
		} else {
			ev.CacheSalt = salt
		}
		out = append(out, ev)
	}
	return out
}

func storedHashes(evs []kv.Event, tier kv.Tier) []kv.BlockHash {
	var out []kv.BlockHash
	for _, e := range evs {
		if e.Kind == kv.Stored && e.Tier == tier {
			out = append(out, e.Blocks...)
		}
	}
	return out
}

// Differential test against kvhash: whatever the engine's block size (equal,
// a multiple, a divisor) and however the stores are split into events, the
// Switchyard hashes announced are exactly kvhash's hashes of the tokens.
func TestMapperMatchesKvhash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const ours = 16
	for _, ebs := range []int{16, 32, 64, 8, 4, 1} {
		for _, perEvent := range []int{1, 3, 100} {
			for _, seed := range [][2]string{{"", ""}, {"lora-a", ""}, {"", "tenant"}, {"lora-a", "tenant"}} {
				name := fmt.Sprintf("engine%d/per%d/%s+%s", ebs, perEvent, seed[0], seed[1])
				t.Run(name, func(t *testing.T) {
					tokens := make([]uint32, 16*ebs+ebs*3)
					for i := range tokens {
						tokens[i] = rng.Uint32N(50000)
					}
					usable := len(tokens) / ebs * ebs
					m := NewMapper(MapperConfig{BlockSize: ours})
					var out []kv.Event
					for _, ev := range engineStores(tokens, ebs, perEvent, 1000, seed[0], seed[1]) {
						out = m.ApplyEvent(&ev, 0, out)
					}
					want := kvhash.New(ours, seed[0], seed[1]).Blocks(tokens[:usable])
					if diff := cmp.Diff(want, storedHashes(out, kv.TierDevice)); diff != "" {
						t.Fatalf("hashes (-kvhash +mapper):\n%s", diff)
					}
					// Parents chain: each Stored event's parent is the block before its first.
					for _, e := range out {
						i := slices.Index(want, e.Blocks[0])
						if (i == 0 && e.Parent != 0) || (i > 0 && e.Parent != want[i-1]) {
							t.Fatalf("event %v has parent %x", e, e.Parent)
						}
					}
					// Removing every engine block removes every Switchyard block.
					var hs []uint64
					for k := range usable / ebs {
						hs = append(hs, 1000+uint64(k))
					}
					out = m.ApplyEvent(&Event{Type: BlockRemoved, Hashes: hs}, 0, out[:0])
					var removed []kv.BlockHash
					for _, e := range out {
						removed = append(removed, e.Blocks...)
					}
					slices.Sort(removed)
					w := slices.Clone(want)
					slices.Sort(w)
					if diff := cmp.Diff(w, removed); diff != "" {
						t.Fatalf("removed (-want +got):\n%s", diff)
					}
					if m.Len() != 0 || len(m.ours) != 0 {
						t.Fatalf("mapper keeps %d engine / %d Switchyard entries after removing all", m.Len(), len(m.ours))
					}
				})
			}
		}
	}
}

func TestMapperRules(t *testing.T) {
	tok := toks(0, 8)
	h := kvhash.New(4, "", "").Blocks(tok)
	stored := func(hs []uint64, tier kv.Tier) Event {
		return Event{Type: BlockStored, Hashes: hs, Tokens: tok[:4*len(hs)], BlockSize: 4, Tier: tier}
	}
	announce := func(tier kv.Tier, hs ...uint64) Event {
		return Event{Type: BlockStored, Hashes: hs, Tier: tier}
	}
	removed := func(tier kv.Tier, hs ...uint64) Event {
		return Event{Type: BlockRemoved, Hashes: hs, Tier: tier}
	}
	for _, tc := range []struct {
		name string
		in   []Event
		want []kv.Event
	}{
		{
			name: "store then remove resolves",
			in:   []Event{stored([]uint64{10, 11}, kv.TierDevice), removed(kv.TierDevice, 11)},
			want: []kv.Event{
				{Kind: kv.Stored, Blocks: h},
				{Kind: kv.Removed, Blocks: h[1:]},
			},
		},
		{
			name: "duplicate removals do not evict a block another announcement holds",
			in: []Event{
				stored([]uint64{10}, kv.TierDevice),
				announce(kv.TierHost, 10), announce(kv.TierHost, 10), // offload connector announces twice
				removed(kv.TierHost, 10), // one holder left
				removed(kv.TierHost, 10), // now gone
				removed(kv.TierHost, 10), // duplicate: ignored
			},
			want: []kv.Event{
				{Kind: kv.Stored, Blocks: h[:1]},
				{Kind: kv.Stored, Tier: kv.TierHost, Blocks: h[:1]},
				{Kind: kv.Removed, Tier: kv.TierHost, Blocks: h[:1]},
			},
		},
		{
			name: "two groups storing the same tokens share one Switchyard block",
			in: []Event{
				stored([]uint64{10}, kv.TierDevice),
				{Type: BlockStored, Hashes: []uint64{10}, Tokens: tok[:4], BlockSize: 4, Group: 1},
				removed(kv.TierDevice, 10),
				{Type: BlockRemoved, Hashes: []uint64{10}, Group: 1},
			},
			want: []kv.Event{
				{Kind: kv.Stored, Blocks: h[:1]},
				{Kind: kv.Removed, Blocks: h[:1]},
			},
		},
		{
			name: "orphan, opaque, filtered and unknown announcements index nothing",
			in: []Event{
				{Type: BlockStored, Hashes: []uint64{11}, Parent: 99, HasParent: true, Tokens: tok[4:], BlockSize: 4},
				{Type: BlockStored, Hashes: []uint64{12}, Tokens: tok[:4], BlockSize: 4, Opaque: true},
				{Type: BlockStored, Hashes: []uint64{13}, Tokens: tok[:4], BlockSize: 4, SpecKind: "mamba"},
				{Type: BlockStored, Hashes: []uint64{14}, Tokens: tok[:3], BlockSize: 3}, // 3 vs 4: refused
				announce(kv.TierHost, 77),
				removed(kv.TierDevice, 11),
			},
		},
		{
			name: "cleared",
			in:   []Event{stored([]uint64{10}, kv.TierDevice), {Type: AllBlocksCleared}, removed(kv.TierDevice, 10)},
			want: []kv.Event{{Kind: kv.Stored, Blocks: h[:1]}, {Kind: kv.Cleared}},
		},
		{
			name: "session id is carried",
			in:   []Event{{Type: BlockStored, Hashes: []uint64{10}, Tokens: tok[:4], BlockSize: 4, SessionID: "s1"}},
			want: []kv.Event{{Kind: kv.Stored, Blocks: h[:1], SessionID: "s1"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMapper(MapperConfig{BlockSize: 4})
			var out []kv.Event
			for _, ev := range tc.in {
				out = m.ApplyEvent(&ev, 0, out)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMapperClearOneRank(t *testing.T) {
	m := NewMapper(MapperConfig{BlockSize: 4})
	a := Event{Type: BlockStored, Hashes: []uint64{1}, Tokens: toks(0, 4), BlockSize: 4}
	b := Event{Type: BlockStored, Hashes: []uint64{1}, Tokens: toks(100, 4), BlockSize: 4}
	m.ApplyEvent(&a, 0, nil)
	m.ApplyEvent(&b, 1, nil)
	out := m.ApplyEvent(&Event{Type: AllBlocksCleared}, 1, nil)
	want := []kv.Event{{Kind: kv.Removed, Blocks: kvhash.New(4, "", "").Blocks(toks(100, 4))}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if got := m.Resolve(1, 0, 0); len(got) != 1 {
		t.Fatalf("rank 0's block was dropped: %v", got)
	}
}

// Property test against a reference model: the residency implied by the
// emitted kv.Events always equals the residency implied by the engine's own
// announcements (an engine block is resident on a tier while stored there
// more times than removed).
func TestMapperResidencyModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	const nBlocks = 12
	tok := make([]uint32, 4*nBlocks)
	for i := range tok {
		tok[i] = rng.Uint32N(100)
	}
	ours := kvhash.New(4, "", "").Blocks(tok)
	for round := range 200 {
		m := NewMapper(MapperConfig{BlockSize: 4})
		model := map[[2]int]int{}       // (block, tier) → holders
		resident := map[[2]uint64]int{} // (our hash, tier) from emitted events
		for range 60 {
			tier := kv.Tier(rng.IntN(kv.NumTiers))
			i := rng.IntN(nBlocks)
			var ev Event
			switch op := rng.IntN(3); {
			case op == 0 && (i == 0 || model[[2]int{i - 1, 0}] > 0 || anyTier(model, i-1)):
				ev = Event{Type: BlockStored, Hashes: []uint64{uint64(100 + i)}, Tokens: tok[4*i : 4*i+4], BlockSize: 4, Tier: tier}
				if i > 0 {
					ev.Parent, ev.HasParent = uint64(100+i-1), true
				}
				model[[2]int{i, int(tier)}]++
			case op == 1 && anyTier(model, i):
				ev = Event{Type: BlockStored, Hashes: []uint64{uint64(100 + i)}, Tier: tier}
				model[[2]int{i, int(tier)}]++
			default:
				ev = Event{Type: BlockRemoved, Hashes: []uint64{uint64(100 + i)}, Tier: tier}
				if model[[2]int{i, int(tier)}] > 0 {
					model[[2]int{i, int(tier)}]--
				}
			}
			for _, e := range m.ApplyEvent(&ev, 0, nil) {
				for _, b := range e.Blocks {
					k := [2]uint64{uint64(b), uint64(e.Tier)}
					switch e.Kind {
					case kv.Stored:
						if resident[k] != 0 {
							t.Fatalf("round %d: %x stored twice on %v", round, b, e.Tier)
						}
						resident[k] = 1
					case kv.Removed:
						if resident[k] != 1 {
							t.Fatalf("round %d: %x removed while absent on %v", round, b, e.Tier)
						}
						delete(resident, k)
					}
				}
			}
			for i := range nBlocks {
				for tr := range kv.NumTiers {
					want := model[[2]int{i, tr}] > 0
					got := resident[[2]uint64{uint64(ours[i]), uint64(tr)}] == 1
					if want != got {
						t.Fatalf("round %d: block %d tier %d: model %v, events %v", round, i, tr, want, got)
					}
				}
			}
		}
		// The snapshot lists exactly the resident blocks.
		snap := m.Snapshot()
		if len(snap) != len(resident) {
			t.Fatalf("snapshot has %d entries, events say %d", len(snap), len(resident))
		}
	}
}

// anyTier reports whether the model holds block i on any tier (so the mapper
// knows its tokens and an announcement can resolve).
func anyTier(model map[[2]int]int, i int) bool {
	for t := range kv.NumTiers {
		if model[[2]int{i, t}] > 0 {
			return true
		}
	}
	return false
}
