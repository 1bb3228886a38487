package flashindex

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// refModel is the tiny reference: a set of blocks per (worker, dp, tier), and
// FindMatches computed by walking the prompt for every worker.
type refKey struct {
	worker string
	dp     uint32
	tier   kv.Tier
}

type refModel struct {
	held map[refKey]map[kv.BlockHash]bool
}

func newRef() *refModel { return &refModel{held: map[refKey]map[kv.BlockHash]bool{}} }

func (r *refModel) apply(worker string, dp uint32, ev kv.Event) {
	k := refKey{worker, dp, ev.Tier}
	switch ev.Kind {
	case kv.Stored:
		if r.held[k] == nil {
			r.held[k] = map[kv.BlockHash]bool{}
		}
		for _, b := range ev.Blocks {
			r.held[k][b] = true
		}
	case kv.Removed:
		for _, b := range ev.Blocks {
			delete(r.held[k], b)
		}
	case kv.Cleared:
		r.removeWorker(worker)
	}
}

func (r *refModel) removeWorker(worker string) {
	for k := range r.held {
		if k.worker == worker {
			delete(r.held, k)
		}
	}
}

func (r *refModel) find(hashes []kv.BlockHash) map[string]WorkerMatch {
	type wd struct {
		w  string
		dp uint32
	}
	pairs := map[wd]bool{}
	for k, set := range r.held {
		if len(set) > 0 {
			pairs[wd{k.worker, k.dp}] = true
		}
	}
	out := map[string]WorkerMatch{}
	for p := range pairs {
		var d [kv.NumTiers]int
		for c := 0; c < kv.NumTiers; c++ {
			for d[c] < len(hashes) {
				ok := false
				for t := 0; t <= c; t++ {
					if r.held[refKey{p.w, p.dp, kv.Tier(t)}][hashes[d[c]]] {
						ok = true
						break
					}
				}
				if !ok {
					break
				}
				d[c]++
			}
		}
		if d[kv.NumTiers-1] == 0 {
			continue
		}
		out[fmt.Sprintf("%s/%d", p.w, p.dp)] = WorkerMatch{Worker: p.w, DPRank: p.dp,
			Device: d[0], Host: d[1] - d[0], Disk: d[2] - d[1], Shared: d[3] - d[2]}
	}
	return out
}

func histogram(ms map[string]WorkerMatch) []DepthCount {
	cnt := map[int]int{}
	for _, m := range ms {
		if m.Device > 0 {
			cnt[m.Device]++
		}
	}
	var out []DepthCount
	for d, n := range cnt {
		out = append(out, DepthCount{d, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Depth < out[j].Depth })
	return out
}

// blockTree is a random forest of chained block hashes, so that random
// paths share prefixes the way prompts of one fleet do.
type blockTree struct {
	hashes []kv.BlockHash
	parent []int // -1 = root
}

func newBlockTree(rng *rand.Rand, n, roots int) *blockTree {
	t := &blockTree{}
	for i := 0; i < n; i++ {
		local := kv.LocalHash(rng.Uint64())
		if i < roots {
			t.hashes = append(t.hashes, kvhash.Root(local))
			t.parent = append(t.parent, -1)
			continue
		}
		// Mostly extend a recent node (long chains), sometimes branch.
		var p int
		if rng.IntN(4) > 0 {
			p = i - 1 - rng.IntN(min(i, 3))
		} else {
			p = rng.IntN(i)
		}
		t.hashes = append(t.hashes, kvhash.Chain(t.hashes[p], local))
		t.parent = append(t.parent, p)
	}
	return t
}

// path returns the hashes from a root to node i.
func (t *blockTree) path(i int) []kv.BlockHash {
	var rev []kv.BlockHash
	for ; i >= 0; i = t.parent[i] {
		rev = append(rev, t.hashes[i])
	}
	for l, r := 0, len(rev)-1; l < r; l, r = l+1, r-1 {
		rev[l], rev[r] = rev[r], rev[l]
	}
	return rev
}

type op struct {
	worker string
	dp     uint32
	remove bool // RemoveWorker
	ev     kv.Event
}

func randomTier(rng *rand.Rand) kv.Tier {
	switch x := rng.IntN(10); {
	case x < 6:
		return kv.TierDevice
	case x < 8:
		return kv.TierHost
	case x < 9:
		return kv.TierDisk
	default:
		return kv.TierShared
	}
}

func randomOp(rng *rand.Rand, t *blockTree, workers, dps int, deviceOnly bool) op {
	o := op{worker: fmt.Sprintf("worker-%d", rng.IntN(workers)), dp: uint32(rng.IntN(dps))}
	tier := kv.TierDevice
	if !deviceOnly {
		tier = randomTier(rng)
	}
	p := t.path(rng.IntN(len(t.hashes)))
	switch x := rng.IntN(100); {
	case x < 60: // store a segment of a path (often a suffix whose parent is missing)
		i := 0
		if rng.IntN(3) == 0 {
			i = rng.IntN(len(p))
		}
		j := i + 1 + rng.IntN(len(p)-i)
		var parent kv.BlockHash
		if i > 0 {
			parent = p[i-1]
		}
		o.ev = kv.Event{Kind: kv.Stored, Tier: tier, Parent: parent, Blocks: p[i:j]}
	case x < 92: // remove some blocks: a tail (usual) or arbitrary ones (holes)
		var bs []kv.BlockHash
		if rng.IntN(2) == 0 {
			bs = p[rng.IntN(len(p)):]
		} else {
			for _, b := range p {
				if rng.IntN(3) == 0 {
					bs = append(bs, b)
				}
			}
		}
		o.ev = kv.Event{Kind: kv.Removed, Tier: tier, Blocks: bs}
	case x < 96:
		o.ev = kv.Event{Kind: kv.Cleared}
	default:
		o.remove = true
	}
	return o
}

func checkAgainst(t *testing.T, ix *Index, ref *refModel, q []kv.BlockHash) {
	t.Helper()
	want := ref.find(q)
	got := ix.FindMatches(q)
	gm := map[string]WorkerMatch{}
	for _, w := range got.Workers {
		gm[fmt.Sprintf("%s/%d", w.Worker, w.DPRank)] = w
	}
	if len(gm) != len(want) {
		t.Fatalf("workers: got %d %v, want %d %v", len(gm), gm, len(want), want)
	}
	for k, w := range want {
		if gm[k] != w {
			t.Fatalf("%s: got %+v, want %+v (query len %d)", k, gm[k], w, len(q))
		}
	}
	wh := histogram(want)
	if len(wh) != len(got.DeviceDepths) {
		t.Fatalf("histogram: got %v, want %v", got.DeviceDepths, wh)
	}
	for i := range wh {
		if wh[i] != got.DeviceDepths[i] {
			t.Fatalf("histogram: got %v, want %v", got.DeviceDepths, wh)
		}
	}
}
