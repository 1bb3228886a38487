package flashindex

import (
	"math/bits"
	"slices"

	"switchyard.dev/pkg/kv"
)

// WorkerMatch is one (worker, dp rank)'s overlap with a prompt, in blocks.
// Device is the longest prefix of the prompt resident on device. Host is how
// many blocks after it are resident on host (or device), Disk how many after
// those are on disk (or faster), Shared how many after those are in the
// shared pool (or faster): Device+Host is the longest prefix on host-or-better.
type WorkerMatch struct {
	Worker string
	DPRank uint32
	Device int
	Host   int
	Disk   int
	Shared int
	// Predicted is how many blocks of Device only predictions cover (0
	// unless the lookup asked for them: FindOptions.Predicted).
	Predicted int
}

// DepthCount says that Workers (worker, dp) pairs have a device prefix of
// exactly Depth blocks.
type DepthCount struct {
	Depth   int
	Workers int
}

// Matches is the answer to FindMatches.
type Matches struct {
	// Workers lists every (worker, dp) with a non-empty match on any tier, in
	// no particular order.
	Workers []WorkerMatch
	// DeviceDepths is the histogram of non-zero device depths, ascending.
	DeviceDepths []DepthCount
	// Probes is how many block positions the lookup examined.
	Probes int
	// PoolPrefix is how many leading blocks of the prompt the shared pool
	// holds (0 without an attached pool): the Shared extension of a worker
	// the index has never heard of, which can read the pool like any other.
	PoolPrefix int
}

// Frequencies expands DeviceDepths into Dynamo's form: element i is the number
// of workers whose device prefix covers block i.
func (m *Matches) Frequencies() []int {
	if len(m.DeviceDepths) == 0 {
		return nil
	}
	maxD := m.DeviceDepths[len(m.DeviceDepths)-1].Depth
	out := make([]int, maxD)
	covering := 0
	for _, dc := range m.DeviceDepths {
		covering += dc.Workers
	}
	pos := 0
	for _, dc := range m.DeviceDepths {
		for ; pos < dc.Depth; pos++ {
			out[pos] = covering
		}
		covering -= dc.Workers
	}
	return out
}

// Only keeps the workers keep accepts, and the depth histogram with them, so
// Frequencies describes just those workers.
func (m *Matches) Only(keep func(worker string) bool) {
	m.Workers = slices.DeleteFunc(m.Workers, func(w WorkerMatch) bool { return !keep(w.Worker) })
	m.countDepths()
}

// countDepths rebuilds DeviceDepths from Workers.
func (m *Matches) countDepths() {
	m.DeviceDepths = m.DeviceDepths[:0]
	for _, w := range m.Workers {
		if w.Device == 0 {
			continue
		}
		i, found := slices.BinarySearchFunc(m.DeviceDepths, w.Device, func(dc DepthCount, d int) int { return dc.Depth - d })
		if found {
			m.DeviceDepths[i].Workers++
		} else {
			m.DeviceDepths = slices.Insert(m.DeviceDepths, i, DepthCount{Depth: w.Device, Workers: 1})
		}
	}
}

// finder holds one lookup's scratch; pooled in Index.scratch.
type finder struct {
	ix     *Index
	hashes []kv.BlockHash
	L, nw  int
	ns     int
	bufs   []uint64 // stack of signatures, each L*nw words
	top    int
	depth  []int32 // [level*ns + slot]
	hist   []DepthCount
	probes int
}

func (f *finder) alloc() []uint64 {
	sz := f.L * f.nw
	if (f.top+1)*sz > len(f.bufs) {
		nb := make([]uint64, 2*(f.top+1)*sz)
		copy(nb, f.bufs)
		f.bufs = nb
	}
	b := f.bufs[f.top*sz : (f.top+1)*sz : (f.top+1)*sz]
	f.top++
	return b
}

// sig fills dst with the rooted holders of prompt block p at each cumulative
// level: a level's words are dst[level*nw:(level+1)*nw].
func (f *finder) sig(p int, dst []uint64) {
	clear(dst)
	f.probes++
	ix := f.ix
	i, ok := ix.ids.get(f.hashes[p])
	if !ok {
		return
	}
	n := ix.node(i)
	nw := f.nw
	n.dev.orInto(&ix.bits, dst[:nw:nw])
	if f.L > 1 {
		lower := ix.lower(i, n)
		for level := 1; level < f.L; level++ {
			lvl := dst[level*nw : (level+1)*nw : (level+1)*nw]
			copy(lvl, dst[(level-1)*nw:level*nw])
			if lower != nil {
				lower[level-1].orInto(&ix.bits, lvl)
			}
		}
	}
	if unrooted := ix.unrooted(i, n); unrooted != nil {
		for level := 0; level < f.L; level++ {
			unrooted[level].andNotInto(&ix.bits, dst[level*nw:(level+1)*nw:(level+1)*nw])
		}
	}
	if ix.deadCount > 0 {
		for level := 0; level < f.L; level++ {
			lvl := dst[level*nw : (level+1)*nw]
			for w := range lvl {
				lvl[w] &^= ix.deadMask[w]
			}
		}
	}
}

func equalWords(a, b []uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// drop records depth d for every slot in a but not in b, per level.
func (f *finder) drop(d int, a, b []uint64) {
	nw := f.nw
	for level := 0; level < f.L; level++ {
		cnt := 0
		for w := 0; w < nw; w++ {
			x := a[level*nw+w] &^ b[level*nw+w]
			for x != 0 {
				t := bits.TrailingZeros64(x)
				x &= x - 1
				f.depth[level*f.ns+w*64+t] = int32(d)
				cnt++
			}
		}
		if level == 0 && cnt > 0 && d > 0 {
			f.hist = append(f.hist, DepthCount{Depth: d, Workers: cnt})
		}
	}
}

// search finds every depth boundary in (lo, hi]: sig(lo)=a, sig(hi)=b.
// Rooted sets only shrink along the prompt, so equal signatures at both ends
// mean nothing changes in between; otherwise bisect. The left half is
// searched first, so boundaries are found in ascending order.
func (f *finder) search(lo, hi int, a, b []uint64) {
	if equalWords(a, b) {
		return
	}
	if hi == lo+1 {
		f.drop(hi, a, b)
		return
	}
	mid := int(uint(lo+hi) >> 1)
	m := f.alloc()
	f.sig(mid, m)
	f.search(lo, mid, a, m)
	f.search(mid, hi, m, b)
	f.top--
}

// FindMatches returns, for the prompt's block hashes (root first), every
// worker's device overlap depth and its host, disk and shared extensions.
func (ix *Index) FindMatches(hashes []kv.BlockHash) Matches {
	var m Matches
	ix.FindMatchesInto(&m, hashes)
	return m
}

// FindMatchesInto is FindMatches reusing m's slices.
func (ix *Index) FindMatchesInto(m *Matches, hashes []kv.BlockHash) {
	ix.FindMatchesWith(m, hashes, FindOptions{})
}

// FindMatchesWith is FindMatchesInto with options.
func (ix *Index) FindMatchesWith(m *Matches, hashes []kv.BlockHash, opt FindOptions) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.matchLocked(m, hashes, opt)
}

// matchLocked is FindMatchesWith's match: the real entries, then the
// predictions asked for and the shared pool. Needs ix.mu held for reading.
func (ix *Index) matchLocked(m *Matches, hashes []kv.BlockHash, opt FindOptions) {
	ix.findLocked(m, hashes)
	if opt.Predicted {
		ix.addPredicted(m, hashes, opt.Now)
	}
	ix.addPool(m, hashes, opt.PoolStale)
}

// findLocked is the lookup over real entries. Needs ix.mu held for reading.
func (ix *Index) findLocked(m *Matches, hashes []kv.BlockHash) {
	m.Workers = m.Workers[:0]
	m.DeviceDepths = m.DeviceDepths[:0]
	m.Probes = 0
	if len(hashes) == 0 {
		return
	}
	f, _ := ix.scratch.Get().(*finder)
	if f == nil {
		f = &finder{}
	}
	defer func() {
		f.hashes = nil
		f.hist = f.hist[:0]
		ix.scratch.Put(f)
	}()

	f.ix = ix
	f.hashes = hashes
	f.L = ix.levels
	f.ns = len(ix.slots)
	f.nw = (f.ns + 63) / 64
	f.top = 0
	f.probes = 0
	f.hist = f.hist[:0]
	if f.nw == 0 {
		return
	}
	if need := f.L * f.ns; len(f.depth) < need {
		f.depth = make([]int32, need)
	}
	D := len(hashes)
	if need := (bits.Len(uint(D)) + 4) * f.L * f.nw; len(f.bufs) < need {
		f.bufs = make([]uint64, need)
	}
	s0 := f.alloc()
	f.sig(0, s0)
	topLvl := s0[(f.L-1)*f.nw : f.L*f.nw]
	any := false
	for _, w := range topLvl {
		if w != 0 {
			any = true
			break
		}
	}
	if !any {
		m.Probes = f.probes
		return
	}
	// Every slot that matches at all starts at depth 0 on every level.
	for w, x := range topLvl {
		for x != 0 {
			t := bits.TrailingZeros64(x)
			x &= x - 1
			for level := 0; level < f.L; level++ {
				f.depth[level*f.ns+w*64+t] = 0
			}
		}
	}
	last := s0
	if D > 1 {
		last = f.alloc()
		f.sig(D-1, last)
		f.search(0, D-1, s0, last)
	}
	zero := f.alloc()
	clear(zero)
	f.drop(D, last, zero)

	for w, x := range topLvl {
		for x != 0 {
			t := bits.TrailingZeros64(x)
			x &= x - 1
			s := w*64 + t
			var d [kv.NumTiers]int
			for level := 0; level < f.L; level++ {
				d[level] = int(f.depth[level*f.ns+s])
			}
			for level := f.L; level < kv.NumTiers; level++ {
				d[level] = d[f.L-1]
			}
			st := &ix.slots[s]
			m.Workers = append(m.Workers, WorkerMatch{
				Worker: st.worker, DPRank: st.dp,
				Device: d[0], Host: d[1] - d[0], Disk: d[2] - d[1], Shared: d[3] - d[2],
			})
		}
	}
	m.DeviceDepths = append(m.DeviceDepths, f.hist...)
	m.Probes = f.probes
}
