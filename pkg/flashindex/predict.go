package flashindex

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"switchyard.dev/pkg/kv"
)

// Predict-on-route: when the scheduler sends a prompt to a worker, the
// worker's Stored events for it arrive only after its prefill has started,
// and sibling requests routed in between (fan-out, best-of-N) would see no
// overlap and scatter. A prediction is a provisional claim that a (worker, dp
// rank) holds a routed prompt's blocks on device, for a short TTL. It is kept
// apart from the real holdings, which stay exact: only lookups that ask for
// predictions (FindOptions.Predicted) count it, as
// max(real depth, predicted depth). A prediction may start past the root
// (its base: the scheduler does not send again the blocks the worker already
// held when the prompt was routed there); it then counts only for a (worker,
// dp rank) whose real device prefix reaches its base.
//
// A prediction ends when it expires (at the now a lookup passes), when the worker's real
// device Stored event covers its last block (the real entries replace it),
// when a real device Removed event names one of its blocks (it is cut just
// before that block: the worker no longer holds what follows), or when the
// worker is cleared or removed. At most Config.MaxPredictedBlocks blocks are
// predicted at once; beyond that the predictions expiring soonest go first.

// predictedBlockBytes is about what one predicted block costs: its hash in
// the prediction and its entry in the worker's membership map.
const predictedBlockBytes = 48

// ErrBadPrediction is Predict's error for a prediction it cannot keep.
var ErrBadPrediction = errors.New("flashindex: invalid prediction")

// FindOptions refine a lookup.
type FindOptions struct {
	// Predicted counts live predictions as device holdings: those that
	// have not expired at Now.
	Predicted bool
	Now       time.Time
	// PoolStale leaves the attached shared pool out, as if none were
	// attached (no Shared credit from it, PoolPrefix 0): the caller no
	// longer trusts the pool index, whose event stream has been down too
	// long (the flash indexer's --stale-after) for it to say what the pool
	// holds, or whether the pool is there at all.
	PoolStale bool
}

// predKey names a (worker, dp rank) whether or not it has a slot yet.
type predKey struct {
	worker string
	dp     uint32
}

type prediction struct {
	key     predKey
	base    int            // the prompt position of blocks[0]
	blocks  []kv.BlockHash // root first from base; cut when contradicted
	expires time.Time
	seq     uint64 // insertion order: equal expiries go oldest first
	at      int    // index in predictions.byExpiry
}

// predictedWorker is one (worker, dp)'s live predictions.
type predictedWorker struct {
	preds []*prediction
	// member has every predicted block, so that a real event costs one
	// small-map probe per block to check.
	member map[kv.BlockHash]membership
}

// membership is where a block sits in the predictions holding it (a sequence
// hash has one position: it chains everything before it) and in how many.
type membership struct{ pos, n int32 }

type predictions struct {
	workers  map[predKey]*predictedWorker
	byExpiry expiryHeap
	blocks   int // predicted blocks, summed over predictions
	seq      uint64
}

// Predict records that worker's dp rank is about to hold blocks (a routed
// prompt's sequence hashes from position base on, root first) on device,
// for ttl from now. Base is how much of the prompt the worker held already
// (0: the whole prompt is predicted).
func (ix *Index) Predict(now time.Time, worker string, dpRank uint32, base int, blocks []kv.BlockHash, ttl time.Duration) error {
	switch {
	case base < 0:
		return fmt.Errorf("%w: base %d", ErrBadPrediction, base)
	case len(blocks) == 0:
		return fmt.Errorf("%w: no blocks", ErrBadPrediction)
	case len(blocks) > ix.cfg.MaxPredictedBlocks:
		return fmt.Errorf("%w: %d blocks, at most %d", ErrBadPrediction, len(blocks), ix.cfg.MaxPredictedBlocks)
	case ttl <= 0:
		return fmt.Errorf("%w: ttl %v", ErrBadPrediction, ttl)
	case slices.Contains(blocks, 0):
		return fmt.Errorf("%w: block hash 0", ErrBadPrediction)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	pr := &ix.pred
	pr.expire(now)
	for pr.blocks+len(blocks) > ix.cfg.MaxPredictedBlocks {
		pr.drop(pr.byExpiry[0])
	}
	if pr.workers == nil {
		pr.workers = make(map[predKey]*predictedWorker)
	}
	k := predKey{worker, dpRank}
	pw := pr.workers[k]
	if pw == nil {
		pw = &predictedWorker{member: make(map[kv.BlockHash]membership, len(blocks))}
		pr.workers[k] = pw
	}
	pr.seq++
	p := &prediction{key: k, base: base, blocks: slices.Clone(blocks), expires: now.Add(ttl), seq: pr.seq}
	pw.preds = append(pw.preds, p)
	for i, b := range p.blocks {
		m, ok := pw.member[b]
		if !ok {
			m.pos = int32(base + i)
		}
		m.n++
		pw.member[b] = m
	}
	pr.blocks += len(p.blocks)
	heap.Push(&pr.byExpiry, p)
	return nil
}

// expire drops the predictions whose time is up.
func (pr *predictions) expire(now time.Time) {
	for len(pr.byExpiry) > 0 && !pr.byExpiry[0].expires.After(now) {
		pr.drop(pr.byExpiry[0])
	}
}

func (pr *predictions) drop(p *prediction) {
	pr.cut(p, 0)
}

// cut keeps the first n blocks of p, dropping p when n is 0.
func (pr *predictions) cut(p *prediction, n int) {
	pw := pr.workers[p.key]
	for _, b := range p.blocks[n:] {
		m := pw.member[b]
		if m.n--; m.n == 0 {
			delete(pw.member, b)
		} else {
			pw.member[b] = m
		}
	}
	pr.blocks -= len(p.blocks) - n
	p.blocks = p.blocks[:n]
	if n > 0 {
		return
	}
	heap.Remove(&pr.byExpiry, p.at)
	pw.preds = slices.DeleteFunc(pw.preds, func(q *prediction) bool { return q == p })
	if len(pw.preds) == 0 {
		delete(pr.workers, p.key)
	}
}

// reconcile applies a real device event of (worker, dp) to its predictions:
// a Stored event covering a prediction's last block replaces it, a Removed
// event cuts each prediction before the first removed block it contains.
func (pr *predictions) reconcile(k predKey, kind kv.EventKind, blocks []kv.BlockHash) {
	for _, b := range blocks {
		pw := pr.workers[k]
		if pw == nil {
			return
		}
		m, ok := pw.member[b]
		if !ok {
			continue
		}
		// Backwards: dropping a prediction shifts the later ones down.
		for j := len(pw.preds) - 1; j >= 0; j-- {
			p := pw.preds[j]
			i := int(m.pos) - p.base
			if i < 0 || i >= len(p.blocks) || p.blocks[i] != b {
				continue
			}
			if kind == kv.Removed {
				pr.cut(p, i)
			} else if i == len(p.blocks)-1 {
				pr.drop(p)
			}
		}
	}
}

// dropWorker drops every prediction of every dp rank of worker.
func (pr *predictions) dropWorker(worker string) {
	for k, pw := range pr.workers {
		if k.worker != worker {
			continue
		}
		for len(pw.preds) > 0 {
			pr.drop(pw.preds[0])
		}
	}
}

// addPredicted raises m's depths to what live predictions cover: for each
// predicted (worker, dp), the longest prefix of hashes that one of its
// predictions continues from its base, where the real device prefix
// reaches that base. Sequence hashes are chained (equal hashes at a position
// mean equal prefixes), so that prefix is found by bisection. Needs ix.mu
// held for reading.
func (ix *Index) addPredicted(m *Matches, hashes []kv.BlockHash, now time.Time) {
	if len(ix.pred.workers) == 0 || len(hashes) == 0 || now.IsZero() {
		return // no clock given: no prediction can be judged live
	}
	// m.Workers index by (worker, dp), of the real matches before any is
	// raised: a prediction's base is judged against the real prefix.
	at := matchIndexes.Get().(map[predKey]int)
	defer func() {
		clear(at)
		matchIndexes.Put(at)
	}()
	for i, w := range m.Workers {
		at[predKey{w.Worker, w.DPRank}] = i
	}
	raised := false
	for k, pw := range ix.pred.workers {
		i, ok := at[k]
		real := 0
		if ok {
			real = m.Workers[i].Device
		}
		depth := 0
		for _, p := range pw.preds {
			if !p.expires.After(now) || p.base > real || p.base >= len(hashes) || p.blocks[0] != hashes[p.base] {
				continue
			}
			q := hashes[p.base:]
			n := min(len(q), len(p.blocks))
			depth = max(depth, p.base+sort.Search(n, func(i int) bool { return q[i] != p.blocks[i] }))
		}
		if depth == 0 {
			continue
		}
		if !ok {
			i = len(m.Workers)
			m.Workers = append(m.Workers, WorkerMatch{Worker: k.worker, DPRank: k.dp})
		}
		m.Workers[i].raiseDevice(depth)
		raised = true
	}
	if raised {
		m.countDepths()
	}
}

// matchIndexes recycles addPredicted's index of m.Workers: a fresh map
// costs more than the rest of the lookup.
var matchIndexes = sync.Pool{New: func() any { return make(map[predKey]int) }}

// raiseDevice makes the device prefix at least d blocks long, counting the
// blocks it adds in Predicted; the host, disk and shared extensions shrink
// to what still lies beyond it.
func (w *WorkerMatch) raiseDevice(d int) {
	if d <= w.Device {
		return
	}
	host := max(w.Device+w.Host, d)
	disk := max(host+w.Disk, d)
	shared := max(disk+w.Shared, d)
	w.Predicted += d - w.Device
	w.Device, w.Host, w.Disk, w.Shared = d, host-d, disk-host, shared-disk
}

// expiryHeap orders predictions by expiry, then age.
type expiryHeap []*prediction

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if !h[i].expires.Equal(h[j].expires) {
		return h[i].expires.Before(h[j].expires)
	}
	return h[i].seq < h[j].seq
}
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *expiryHeap) Push(x any) {
	p := x.(*prediction)
	p.at = len(*h)
	*h = append(*h, p)
}
func (h *expiryHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}
