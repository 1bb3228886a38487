package flashindex

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"switchyard.dev/pkg/kv"
)

// tierEngine is a worker whose device, host and disk hold blocks of a block
// tree, with the moves a tiered engine makes: prompts stored on device
// (promoting from below), demotions one tier down and evictions, picked
// leaves-first, parents-first or from the middle of chains. Each demotion is
// emitted in either order (Stored below then Removed above, or the reverse),
// so the index sees its holes made and filled again.
type tierEngine struct {
	rng  *rand.Rand
	tree *blockTree
	idx  map[kv.BlockHash]int // hash → tree node
	held [3]map[kv.BlockHash]bool
	cap  [3]int
}

func newTierEngine(rng *rand.Rand, tree *blockTree, caps [3]int) *tierEngine {
	e := &tierEngine{rng: rng, tree: tree, idx: map[kv.BlockHash]int{}, cap: caps}
	for i, h := range tree.hashes {
		e.idx[h] = i
	}
	for t := range e.held {
		e.held[t] = map[kv.BlockHash]bool{}
	}
	return e
}

func (e *tierEngine) parent(h kv.BlockHash) kv.BlockHash {
	if p := e.tree.parent[e.idx[h]]; p >= 0 {
		return e.tree.hashes[p]
	}
	return 0
}

// victim picks a block of tier t to move out: a deepest one, a shallowest
// one, or any.
func (e *tierEngine) victim(t int) kv.BlockHash {
	var out kv.BlockHash
	best := -1
	mode := e.rng.IntN(3)
	for h := range e.held[t] {
		d := len(e.tree.path(e.idx[h]))
		score := e.rng.IntN(1000)
		switch mode {
		case 0:
			score = d*1000 + score
		case 1:
			score = -d*1000 + score
		}
		if score > best || best == -1 {
			out, best = h, score
		}
	}
	return out
}

// move takes h off tier t, demoting it to t+1 (evicting there first when
// full) unless t is the lowest tier.
func (e *tierEngine) move(t int, h kv.BlockHash) []kv.Event {
	removed := kv.Event{Kind: kv.Removed, Tier: kv.Tier(t), Blocks: []kv.BlockHash{h}}
	delete(e.held[t], h)
	if t == len(e.held)-1 || e.held[t+1][h] {
		return []kv.Event{removed}
	}
	var evs []kv.Event
	if len(e.held[t+1]) >= e.cap[t+1] {
		evs = append(evs, e.move(t+1, e.victim(t+1))...)
	}
	e.held[t+1][h] = true
	stored := kv.Event{Kind: kv.Stored, Tier: kv.Tier(t + 1), Parent: e.parent(h), Blocks: []kv.BlockHash{h}}
	if e.rng.IntN(2) == 0 {
		return append(evs, removed, stored)
	}
	return append(evs, stored, removed)
}

// serve stores the path to a random node on device, evicting first.
func (e *tierEngine) serve() []kv.Event {
	p := e.tree.path(e.rng.IntN(len(e.tree.hashes)))
	var evs []kv.Event
	var parent kv.BlockHash
	for _, h := range p {
		if !e.held[0][h] {
			if len(e.held[0]) >= e.cap[0] {
				// Never evict what this prompt is loading.
				if v := e.victim(0); !isAncestorOrSelf(p, v) {
					evs = append(evs, e.move(0, v)...)
				}
			}
			e.held[0][h] = true
			evs = append(evs, kv.Event{Kind: kv.Stored, Tier: kv.TierDevice, Parent: parent, Blocks: []kv.BlockHash{h}})
		}
		parent = h
	}
	return evs
}

func isAncestorOrSelf(p []kv.BlockHash, h kv.BlockHash) bool {
	for _, x := range p {
		if x == h {
			return true
		}
	}
	return false
}

func TestDifferentialTierMoves(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 11))
	tree := newBlockTree(rng, 400, 2)
	ix := New(Config{WriteChunk: 2})
	ref := newRef()
	engines := make([]*tierEngine, 3)
	for w := range engines {
		engines[w] = newTierEngine(rng, tree, [3]int{40, 80, 120})
	}
	rounds := 400
	if testing.Short() || raceEnabled {
		rounds = 100
	}
	var usedHost, usedDisk bool
	for round := 0; round < rounds; round++ {
		w := rng.IntN(len(engines))
		e := engines[w]
		var evs []kv.Event
		switch rng.IntN(4) {
		case 0, 1:
			evs = e.serve()
		case 2: // a burst of demotions from device
			for k := 0; k < 10 && len(e.held[0]) > 0; k++ {
				evs = append(evs, e.move(0, e.victim(0))...)
			}
		default: // evictions from host or disk
			tier := 1 + rng.IntN(2)
			for k := 0; k < 10 && len(e.held[tier]) > 0; k++ {
				evs = append(evs, e.move(tier, e.victim(tier))...)
			}
		}
		name := fmt.Sprintf("worker-%d", w)
		for _, ev := range evs {
			if err := ix.Apply(name, 0, ev); err != nil {
				t.Fatal(err)
			}
			ref.apply(name, 0, ev)
		}
		for k := 0; k < 6; k++ {
			checkAgainst(t, ix, ref, tree.path(rng.IntN(len(tree.hashes))))
			checkResident(t, ix, ref, tree, rng.IntN(len(tree.hashes)))
		}
		checkEntries(t, ix, ref)
		// The victims come from maps, so how full each tier ends up varies
		// from run to run; what the check needs is that each was used.
		st := ix.Stats()
		usedHost = usedHost || st.Entries[kv.TierHost] > 0
		usedDisk = usedDisk || st.Entries[kv.TierDisk] > 0
	}
	if !usedHost || !usedDisk {
		t.Fatalf("the workload never filled the lower tiers (host %v, disk %v)", usedHost, usedDisk)
	}
}

// tierMoveEvents is one worker's events while sessions of chain blocks each
// pass through a device of dev blocks and a host of host blocks: a session
// is stored on device, the oldest one on device is demoted to host leaves
// first (each block Stored on host and Removed on device, in the order
// storedFirst says), and host evicts its oldest blocks to make room.
func tierMoveEvents(sessions, chainLen, dev, host int, storedFirst bool) (evs []kv.Event, blocks int) {
	var onDev [][]kv.BlockHash
	var onHost []kv.BlockHash // FIFO: demotion order
	for s := 0; s < sessions; s++ {
		c := chain(chainLen, uint64(s)+1)
		for len(onDev) > 0 && (len(onDev)+1)*chainLen > dev {
			old := onDev[0]
			onDev = onDev[1:]
			for i := len(old) - 1; i >= 0; i-- {
				if len(onHost) >= host {
					evs = append(evs, kv.Event{Kind: kv.Removed, Tier: kv.TierHost, Blocks: onHost[:1:1]})
					onHost = onHost[1:]
				}
				var parent kv.BlockHash
				if i > 0 {
					parent = old[i-1]
				}
				stored := kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Parent: parent, Blocks: old[i : i+1 : i+1]}
				removed := kv.Event{Kind: kv.Removed, Tier: kv.TierDevice, Blocks: old[i : i+1 : i+1]}
				if storedFirst {
					evs = append(evs, stored, removed)
				} else {
					evs = append(evs, removed, stored)
				}
				onHost = append(onHost, old[i])
			}
		}
		evs = append(evs, kv.Event{Kind: kv.Stored, Tier: kv.TierDevice, Blocks: c})
		onDev = append(onDev, c)
	}
	for _, ev := range evs {
		blocks += len(ev.Blocks)
	}
	return evs, blocks
}

// BenchmarkApplyTierMoves applies the events of tierMoveEvents (sessions of
// 400 blocks through a 1,600-block device and a 6,400-block host) to a new
// index per iteration, with demotions in either event order.
func BenchmarkApplyTierMoves(b *testing.B) {
	for _, storedFirst := range []bool{true, false} {
		name := "removed-first"
		if storedFirst {
			name = "stored-first"
		}
		b.Run(name, func(b *testing.B) {
			evs, blocks := tierMoveEvents(60, 400, 1600, 6400, storedFirst)
			b.ResetTimer()
			for range b.N {
				ix := New(Config{})
				for _, ev := range evs {
					if err := ix.Apply("w", 0, ev); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block-event")
		})
	}
}
