package flashindex

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"switchyard.dev/pkg/kv"
)

// Config bounds the index. The zero value means DefaultConfig.
type Config struct {
	// MaxBlocks caps the number of distinct blocks tracked (including
	// ancestors kept only as chain links). A Stored event that would exceed it
	// is cut short there and the rest is counted in Stats.Dropped: the index
	// then under-reports overlap, which costs a cache miss, never a wrong
	// route to a worker that lacks the blocks. About 48 bytes per block held
	// by one worker and less per entry when shared, so the default bounds the
	// index under 1 GiB. Capped at 2^26 (node ids are 28 bits).
	MaxBlocks int
	// WriteChunk is the most blocks applied under one hold of the write lock;
	// it bounds how long a reader can wait behind a large Stored event.
	WriteChunk int
	// SweepChunk is the most nodes scanned under one hold of the write lock
	// when a removed or cleared worker's entries are swept.
	SweepChunk int
	// Now is the clock of predicted entries' expiry (predict.go); Predict
	// needs it. The index reads no clock of its own.
	Now func() time.Time
	// MaxPredictedBlocks bounds the blocks of all live predictions together
	// (about 48 bytes each); beyond it the soonest to expire go first.
	MaxPredictedBlocks int
}

// DefaultConfig is the configuration used for zero fields.
func DefaultConfig() Config {
	return Config{MaxBlocks: 16 << 20, WriteChunk: 512, SweepChunk: 16384, MaxPredictedBlocks: 1 << 20}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBlocks <= 0 {
		c.MaxBlocks = d.MaxBlocks
	}
	// Ghost parents can at most double the nodes of MaxBlocks blocks.
	c.MaxBlocks = min(c.MaxBlocks, maxNodes/2)
	if c.WriteChunk <= 0 {
		c.WriteChunk = d.WriteChunk
	}
	if c.SweepChunk <= 0 {
		c.SweepChunk = d.SweepChunk
	}
	if c.MaxPredictedBlocks <= 0 {
		c.MaxPredictedBlocks = d.MaxPredictedBlocks
	}
	return c
}

// Errors returned by Apply.
var (
	ErrBadEvent     = errors.New("flashindex: invalid event")
	ErrTooManySlots = errors.New("flashindex: too many (worker, dp rank) pairs")
)

// node is one block. Invariants (all under Index.mu):
//
//   - A node with fParentKnown and a parent is linked into its parent's
//     child list, and the parent node exists (possibly as a holder-less
//     "ghost" kept only so the link survives).
//   - A node is deleted as soon as it has no holders on any tier and no
//     children.
//   - For each cumulative level c (tiers 0..c) and slot s holding the block at
//     level c: s is "rooted" at c iff the block is a root or s is rooted at c
//     in the parent. Non-rooted holders are recorded in the node's side sets
//     (out-of-order events, evictions from the middle of a chain or of a
//     parent first). Rooted sets therefore shrink monotonically along any
//     chain, which is what makes bisection exact.
type node struct {
	hash kv.BlockHash
	// pf packs the flags (low flagBits bits) and the parent node as index+1
	// (with fParentKnown, 0 = root). With the 8-byte slotSet a node is 32
	// bytes: never split across cache lines, and free of pointers, so the
	// garbage collector never scans the slab.
	pf      uint32
	child   uint32  // first child, as index+1; 0 = none
	sibling uint32  // next sibling in the parent's child list, index+1
	prev    uint32  // previous sibling, index+1; 0 = first child
	dev     slotSet // device holders
}

const (
	flagBits = 4
	flagMask = 1<<flagBits - 1
	// maxNodes keeps node index+1 within pf's upper 28 bits.
	maxNodes = 1<<(32-flagBits) - 2
)

func (n *node) fl() uint32        { return n.pf & flagMask }
func (n *node) parentRef() uint32 { return n.pf >> flagBits }

const (
	fUsed        = 1 << iota // slab entry in use
	fParentKnown             // parent was set by a Stored event
	fLower                   // the node's side sets hold host/disk/shared holders
	fUnrooted                // the node's side sets hold non-rooted holders
)

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
)

type lowerSets [kv.NumTiers - 1]slotSet // holders on tiers 1..NumTiers-1
type levelSets [kv.NumTiers]slotSet     // per cumulative level

// sideSets are a node's sets that most nodes lack: its holders on host, disk
// and shared tiers (fLower) and its non-rooted holders (fUnrooted).
//
// They live in a chunked slab (sides), found through a per-node number in a
// slab parallel to the nodes' (sideOf). With tiers, demotions and lower-tier
// evictions make un-rooting and re-rooting whole subtrees routine, and every
// step of those walks asks for these sets: an array load instead of a Go map
// lookup, and a free list instead of an allocation per entry, is most of
// what those walks cost. A node chunk whose nodes never had side sets (a
// device-only fleet) has no sideOf chunk.
type sideSets struct {
	lo lowerSets
	u  levelSets
}

type slotState struct {
	worker   string
	dp       uint32
	used     bool // allocated to a (worker, dp)
	dead     bool // retired, waiting for its sweep
	held     [kv.NumTiers]int
	unrooted [kv.NumTiers]int // per cumulative level
}

type workerState struct {
	mu    sync.Mutex // serialises this worker's Apply calls
	name  string
	slots map[uint32]slot // dp rank → slot; guarded by Index.mu
	gone  bool            // removed; callers must look the worker up again
}

// Index is the KV index. The zero value is not usable; call New.
type Index struct {
	cfg Config

	wmu     sync.Mutex
	workers map[string]*workerState

	mu       sync.RWMutex
	ids      blockTable
	chunks   [][]node
	slabLen  int
	free     []uint32
	sideOf   [][]uint32 // per node chunk (nil until needed): side entry+1, 0 = none
	sides    [][]sideSets
	sideLen  int
	sideFree []uint32
	bits     bitsets // every slotSet's bitset, when it has one
	pred     predictions
	levels   int // cumulative levels tracked: 1 + highest tier ever seen

	slots     []slotState
	freeSlots []slot
	deadMask  []uint64
	deadCount int

	entries  [kv.NumTiers]int
	counters counters
	stack    []uint32
	// Per block of the batch being applied (prefetch): tagOf, node index+1
	// (0 = absent), and the table slot that held it or ended its probe run.
	tags  []uint64
	found []uint32
	at    []uint64
	sink  uint64 // keeps prefetch's loads from being optimised away

	scratch sync.Pool
	pool    poolRef // the shared-pool index, when attached
}

type counters struct {
	blockEvents uint64 // blocks in applied Stored/Removed events
	duplicates  uint64 // stores of blocks already held, removals of blocks not held
	dropped     uint64 // blocks not stored because MaxBlocks was reached
	clears      uint64
}

// New returns an empty index.
func New(cfg Config) *Index {
	ix := &Index{
		cfg:     cfg.withDefaults(),
		workers: make(map[string]*workerState),
		levels:  1,
	}
	ix.ids.chunks = &ix.chunks
	return ix
}

func (ix *Index) node(i uint32) *node { return &ix.chunks[i>>chunkBits][i&(chunkSize-1)] }

const (
	sideChunkBits = 10
	sideChunkSize = 1 << sideChunkBits
)

// side returns node i's side sets; the node must have fLower or fUnrooted.
// The pointer stays valid until the node loses both flags.
func (ix *Index) side(i uint32) *sideSets {
	k := ix.sideOf[i>>chunkBits][i&(chunkSize-1)] - 1
	return &ix.sides[k>>sideChunkBits][k&(sideChunkSize-1)]
}

// addSide gives node i, which has neither fLower nor fUnrooted, empty side
// sets.
func (ix *Index) addSide(i uint32) {
	var k uint32
	if n := len(ix.sideFree); n > 0 {
		k = ix.sideFree[n-1]
		ix.sideFree = ix.sideFree[:n-1]
	} else {
		if ix.sideLen == len(ix.sides)*sideChunkSize {
			ix.sides = append(ix.sides, make([]sideSets, sideChunkSize))
		}
		k = uint32(ix.sideLen)
		ix.sideLen++
	}
	c := i >> chunkBits
	for int(c) >= len(ix.sideOf) {
		ix.sideOf = append(ix.sideOf, nil)
	}
	if ix.sideOf[c] == nil {
		ix.sideOf[c] = make([]uint32, chunkSize)
	}
	ix.sideOf[c][i&(chunkSize-1)] = k + 1
}

// dropSide releases node i's side sets, all empty, if the caller just
// cleared the last of the node's side flags.
func (ix *Index) dropSide(i uint32, n *node) {
	if n.fl()&(fLower|fUnrooted) != 0 {
		return
	}
	ref := &ix.sideOf[i>>chunkBits][i&(chunkSize-1)]
	ix.sideFree = append(ix.sideFree, *ref-1)
	*ref = 0
}

// lower returns node i's lower-tier holders, or nil without fLower.
func (ix *Index) lower(i uint32, n *node) *lowerSets {
	if n.fl()&fLower == 0 {
		return nil
	}
	return &ix.side(i).lo
}

// unrooted returns node i's non-rooted holders, or nil without fUnrooted.
func (ix *Index) unrooted(i uint32, n *node) *levelSets {
	if n.fl()&fUnrooted == 0 {
		return nil
	}
	return &ix.side(i).u
}

// newNode allocates a node for h, which must be absent, and maps h to it.
func (ix *Index) newNode(h kv.BlockHash) uint32 {
	tag := tagOf(h)
	ix.ids.reserve(1)
	pos, _ := ix.ids.find(h, tag)
	return ix.newNodeAt(h, tag, pos)
}

// newNodeAt is newNode for the empty table slot pos that find returned for h.
func (ix *Index) newNodeAt(h kv.BlockHash, tag, pos uint64) uint32 {
	var i uint32
	if n := len(ix.free); n > 0 {
		i = ix.free[n-1]
		ix.free = ix.free[:n-1]
	} else {
		if ix.slabLen == len(ix.chunks)*chunkSize {
			ix.chunks = append(ix.chunks, make([]node, chunkSize))
		}
		i = uint32(ix.slabLen)
		ix.slabLen++
	}
	*ix.node(i) = node{hash: h, pf: fUsed}
	ix.ids.insertAt(pos, tag, i)
	return i
}

func (ix *Index) link(parent, child uint32) {
	p, c := ix.node(parent), ix.node(child)
	c.sibling = p.child
	c.prev = 0
	if p.child != 0 {
		ix.node(p.child - 1).prev = child + 1
	}
	p.child = child + 1
}

// unlink is O(1): shared prefixes (a system prompt's last block) can have
// thousands of children.
func (ix *Index) unlink(parent, child uint32) {
	c := ix.node(child)
	if c.prev == 0 {
		ix.node(parent).child = c.sibling
	} else {
		ix.node(c.prev - 1).sibling = c.sibling
	}
	if c.sibling != 0 {
		ix.node(c.sibling - 1).prev = c.prev
	}
	c.sibling, c.prev = 0, 0
}

// tierSet returns the holders of node i on tier t, creating the lower-tier
// sets when create is set; nil when absent.
func (ix *Index) tierSet(i uint32, n *node, t kv.Tier, create bool) *slotSet {
	if t == kv.TierDevice {
		return &n.dev
	}
	if n.fl()&fLower == 0 {
		if !create {
			return nil
		}
		if n.fl()&fUnrooted == 0 {
			ix.addSide(i)
		}
		n.pf |= fLower
	}
	return &ix.side(i).lo[t-1]
}

func (ix *Index) dropLowerIfEmpty(i uint32, n *node) {
	if n.fl()&fLower == 0 {
		return
	}
	lo := &ix.side(i).lo
	for t := range lo {
		if !lo[t].empty() {
			return
		}
	}
	n.pf &^= fLower
	ix.dropSide(i, n)
}

// minTier is the fastest tier on which s holds node i, or NumTiers.
func (ix *Index) minTier(i uint32, n *node, s slot) int {
	if n.dev.has(&ix.bits, s) {
		return 0
	}
	if lo := ix.lower(i, n); lo != nil {
		for t := range lo {
			if lo[t].has(&ix.bits, s) {
				return t + 1
			}
		}
	}
	return kv.NumTiers
}

func (ix *Index) heldAt(i uint32, n *node, s slot, c int) bool {
	if n.dev.has(&ix.bits, s) {
		return true
	}
	if c > 0 && n.fl()&fLower != 0 {
		lo := &ix.side(i).lo
		for t := 0; t < c; t++ {
			if lo[t].has(&ix.bits, s) {
				return true
			}
		}
	}
	return false
}

func (ix *Index) inU(i uint32, n *node, s slot, c int) bool {
	return n.fl()&fUnrooted != 0 && ix.side(i).u[c].has(&ix.bits, s)
}

func (ix *Index) rootedAt(i uint32, n *node, s slot, c int) bool {
	return ix.heldAt(i, n, s, c) && !ix.inU(i, n, s, c)
}

func (ix *Index) addU(i uint32, n *node, s slot, c int) {
	if n.fl()&fUnrooted == 0 {
		if n.fl()&fLower == 0 {
			ix.addSide(i)
		}
		n.pf |= fUnrooted
	}
	if ix.side(i).u[c].add(&ix.bits, s) {
		ix.slots[s].unrooted[c]++
	}
}

func (ix *Index) removeU(i uint32, n *node, s slot, c int) {
	u := &ix.side(i).u
	if u[c].remove(&ix.bits, s) {
		ix.slots[s].unrooted[c]--
	}
	ix.dropUIfEmpty(i, n)
}

func (ix *Index) dropUIfEmpty(i uint32, n *node) {
	if n.fl()&fUnrooted == 0 {
		return
	}
	u := &ix.side(i).u
	for c := range u {
		if !u[c].empty() {
			return
		}
	}
	n.pf &^= fUnrooted
	ix.dropSide(i, n)
}

// reroot: s just became rooted at level c in node i; its held-but-unrooted
// descendants become rooted too.
func (ix *Index) reroot(i uint32, s slot, c int) {
	st := append(ix.stack[:0], i)
	for len(st) > 0 {
		x := st[len(st)-1]
		st = st[:len(st)-1]
		for ch := ix.node(x).child; ch != 0; {
			ci := ch - 1
			cn := ix.node(ci)
			ch = cn.sibling
			if ix.inU(ci, cn, s, c) {
				ix.removeU(ci, cn, s, c)
				st = append(st, ci)
			}
		}
	}
	ix.stack = st[:0]
}

// unroot: s just stopped being rooted at level c in node i; its rooted
// descendants stop being rooted.
func (ix *Index) unroot(i uint32, s slot, c int) {
	st := append(ix.stack[:0], i)
	for len(st) > 0 {
		x := st[len(st)-1]
		st = st[:len(st)-1]
		for ch := ix.node(x).child; ch != 0; {
			ci := ch - 1
			cn := ix.node(ci)
			ch = cn.sibling
			if ix.heldAt(ci, cn, s, c) && !ix.inU(ci, cn, s, c) {
				ix.addU(ci, cn, s, c)
				st = append(st, ci)
			}
		}
	}
	ix.stack = st[:0]
}

// maybeDelete removes node i if it has no holders and no children, then
// walks up removing ghost ancestors that were kept only for it.
// hint is a table slot that may hold node i's entry (where the prefetch
// found it, if no deletion since moved it); any slot will do when unknown.
func (ix *Index) maybeDelete(i uint32, hint uint64) {
	for {
		n := ix.node(i)
		if !n.dev.empty() || n.fl()&(fLower|fUnrooted) != 0 || n.child != 0 {
			return
		}
		pi, ok := n.parentRef()-1, n.parentRef() != 0
		if ok {
			ix.unlink(pi, i)
		}
		tag := tagOf(n.hash)
		ix.ids.del(tag, i, hint)
		*n = node{}
		ix.free = append(ix.free, i)
		if !ok {
			return
		}
		i, hint = pi, ix.ids.home(tag)
	}
}

// ensureLevels starts tracking cumulative levels up to want-1. Until a tier
// is first seen, its level equals the one below, so the new levels start as
// copies of the highest tracked one.
func (ix *Index) ensureLevels(want int) {
	if want <= ix.levels {
		return
	}
	top := ix.levels - 1
	// Free side entries hold empty sets, so every entry may be visited.
	for k := 0; k < ix.sideLen; k++ {
		u := &ix.sides[k>>sideChunkBits][k&(sideChunkSize-1)].u
		for c := ix.levels; c < want; c++ {
			u[top].forEach(&ix.bits, func(s slot) { u[c].add(&ix.bits, s) })
		}
	}
	for s := range ix.slots {
		for c := ix.levels; c < want; c++ {
			ix.slots[s].unrooted[c] = ix.slots[s].unrooted[top]
		}
	}
	ix.levels = want
}

// worker returns the state of worker name, creating it.
func (ix *Index) worker(name string) *workerState {
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	ws := ix.workers[name]
	if ws == nil {
		ws = &workerState{name: name, slots: make(map[uint32]slot)}
		ix.workers[name] = ws
	}
	return ws
}

// lockWorker returns worker name's state with its mutex held.
func (ix *Index) lockWorker(name string) *workerState {
	for {
		ws := ix.worker(name)
		ws.mu.Lock()
		if !ws.gone {
			return ws
		}
		ws.mu.Unlock()
	}
}

// slotFor returns the slot of (ws, dp), allocating one. Needs ix.mu held.
func (ix *Index) slotFor(ws *workerState, dp uint32) (slot, error) {
	if s, ok := ws.slots[dp]; ok {
		return s, nil
	}
	var s slot
	if n := len(ix.freeSlots); n > 0 {
		s = ix.freeSlots[n-1]
		ix.freeSlots = ix.freeSlots[:n-1]
	} else {
		if len(ix.slots) >= maxSlots {
			return 0, ErrTooManySlots
		}
		s = slot(len(ix.slots))
		ix.slots = append(ix.slots, slotState{})
		if need := len(ix.slots)/64 + 1; len(ix.deadMask) < need {
			ix.deadMask = append(ix.deadMask, 0)
		}
	}
	ix.slots[s] = slotState{worker: ws.name, dp: dp, used: true}
	ws.slots[dp] = s
	return s, nil
}

// Apply applies one event from worker's dp rank. Events of one worker must be
// applied in order (the caller's job); events of different workers may be
// applied concurrently. Stored blocks already held and Removed blocks not
// held are ignored (counted as duplicates), so replays are harmless.
func (ix *Index) Apply(worker string, dpRank uint32, ev kv.Event) error {
	if !ev.Tier.Valid() {
		return fmt.Errorf("%w: tier %d", ErrBadEvent, ev.Tier)
	}
	switch ev.Kind {
	case kv.Stored, kv.Removed:
	case kv.Cleared:
		ix.clearWorker(worker, false)
		return nil
	default:
		return fmt.Errorf("%w: kind %d", ErrBadEvent, ev.Kind)
	}
	ws := ix.lockWorker(worker)
	defer ws.mu.Unlock()

	blocks := ev.Blocks
	parent := ev.Parent
	for first := true; first || len(blocks) > 0; first = false {
		n := min(len(blocks), ix.cfg.WriteChunk)
		chunk := blocks[:n]
		blocks = blocks[n:]
		ix.mu.Lock()
		s, err := ix.slotFor(ws, dpRank)
		if err != nil {
			ix.mu.Unlock()
			return err
		}
		ix.counters.blockEvents += uint64(len(chunk))
		if ev.Kind == kv.Stored {
			ix.ensureLevels(int(ev.Tier) + 1)
			if !ix.storeLocked(s, ev.Tier, parent, chunk) {
				ix.counters.dropped += uint64(len(blocks))
				ix.mu.Unlock()
				return nil
			}
			if n > 0 {
				parent = chunk[n-1]
			}
		} else {
			ix.removeLocked(s, ev.Tier, chunk)
		}
		if ev.Tier == kv.TierDevice && len(ix.pred.workers) > 0 {
			ix.pred.reconcile(predKey{worker, dpRank}, ev.Kind, chunk)
		}
		ix.mu.Unlock()
	}
	return nil
}

// storeLocked adds s as a holder of blocks (a chain extending parent) on
// tier. It returns false if it stopped early (MaxBlocks or an invalid hash).
func (ix *Index) storeLocked(s slot, tier kv.Tier, parent kv.BlockHash, blocks []kv.BlockHash) bool {
	L := ix.levels
	var pr [kv.NumTiers]bool // s rooted in the parent, per level
	var pref uint32          // parent node index+1, 0 = none
	if parent == 0 {
		for c := range pr {
			pr[c] = true
		}
	} else if pi, ok := ix.ids.get(parent); ok {
		pref = pi + 1
		pn := ix.node(pi)
		for c := 0; c < L; c++ {
			pr[c] = ix.rootedAt(pi, pn, s, c)
		}
	}
	st := &ix.slots[s]
	// Room for every block and a ghost parent, so that no slot moves
	// between the prefetch and the inserts.
	ix.ids.reserve(len(blocks) + 1)
	found := ix.prefetch(blocks)
	for k, b := range blocks {
		if b == 0 {
			ix.counters.dropped += uint64(len(blocks) - k)
			return false
		}
		// Nothing is deleted while storing, so a block found by the
		// prefetch is still there; one not found may be by now (listed
		// twice, or created as a ghost parent above), hence the probe.
		i := found[k] - 1
		if found[k] == 0 {
			// The empty slot the prefetch found is still where b goes
			// unless an insert since filled it.
			pos, ok := ix.at[k], false
			if ix.ids.e[pos] != 0 {
				pos, ok = ix.ids.find(b, ix.tags[k])
			}
			if ok {
				i = uint32(ix.ids.e[pos]) - 1
			} else {
				if ix.ids.len() >= ix.cfg.MaxBlocks {
					ix.counters.dropped += uint64(len(blocks) - k)
					return false
				}
				i = ix.newNodeAt(b, ix.tags[k], pos)
			}
		}
		n := ix.node(i)
		if n.fl()&fParentKnown == 0 {
			n.pf |= fParentKnown
			if parent != 0 {
				if pref == 0 {
					// Keep a holder-less ghost of the parent so the chain
					// link survives until the parent's own Stored arrives.
					pref = ix.newNode(parent) + 1
					n = ix.node(i)
				}
				n.pf = n.pf&flagMask | pref<<flagBits
				ix.link(pref-1, i)
			}
		}
		mt := ix.minTier(i, n, s)
		if ix.tierSet(i, n, tier, true).add(&ix.bits, s) {
			st.held[tier]++
			ix.entries[tier]++
		} else {
			ix.counters.duplicates++
		}
		var r [kv.NumTiers]bool
		for c := 0; c < L; c++ {
			switch {
			case c >= int(tier) && mt > c: // newly held at level c
				if pr[c] {
					r[c] = true
					if st.unrooted[c] > 0 {
						ix.reroot(i, s, c)
					}
				} else {
					ix.addU(i, n, s, c)
				}
			default:
				r[c] = ix.rootedAt(i, n, s, c)
			}
		}
		pr = r
		parent = b
		pref = i + 1
	}
	return true
}

// prefetch looks every block up before any is changed, in passes whose
// loads are independent of each other, so the CPU overlaps their cache misses
// instead of paying them one after another inside the dependent update loop
// (the index is far larger than the cache, and a miss that waits alone costs
// hundreds of nanoseconds: this is most of apply's cost). First every block's
// home table slot, then the probes, whose full-hash checks load the nodes (a
// node is 32 bytes in a 32-byte-aligned slab: one cache line). It fills
// ix.tags, ix.found and ix.at and returns ix.found: node index+1 or 0 per
// block, valid until the first deletion.
func (ix *Index) prefetch(blocks []kv.BlockHash) []uint32 {
	ix.ids.reserve(0) // allocates a new index's table
	tags := ix.tags[:0]
	for _, b := range blocks {
		tags = append(tags, tagOf(b))
	}
	ix.tags = tags
	ix.sink += ix.ids.touch(tags)
	f, at := ix.found[:0], ix.at[:0]
	for k, b := range blocks {
		pos, ok := ix.ids.find(b, tags[k])
		var i uint32
		if ok {
			i = uint32(ix.ids.e[pos])
		}
		f = append(f, i)
		at = append(at, pos)
	}
	ix.found, ix.at = f, at
	return f
}

func (ix *Index) removeLocked(s slot, tier kv.Tier, blocks []kv.BlockHash) {
	st := &ix.slots[s]
	found := ix.prefetch(blocks)
	for k, b := range blocks {
		i := found[k]
		if i == 0 {
			ix.counters.duplicates++
			continue
		}
		i--
		n := ix.node(i)
		if n.hash != b || n.fl()&fUsed == 0 {
			// Deleted earlier in this batch (a block listed twice).
			ix.counters.duplicates++
			continue
		}
		set := ix.tierSet(i, n, tier, false)
		if set == nil || !set.remove(&ix.bits, s) {
			ix.counters.duplicates++
			continue
		}
		st.held[tier]--
		ix.entries[tier]--
		if tier != kv.TierDevice {
			ix.dropLowerIfEmpty(i, n)
		}
		for c := int(tier); c < ix.levels; c++ {
			if ix.heldAt(i, n, s, c) {
				break // still held at c through a faster tier, so at every level above too
			}
			if ix.inU(i, n, s, c) {
				ix.removeU(i, n, s, c)
			} else {
				ix.unroot(i, s, c)
			}
		}
		ix.maybeDelete(i, ix.at[k])
	}
}

// RemoveWorker drops every block of every dp rank of worker.
func (ix *Index) RemoveWorker(worker string) { ix.clearWorker(worker, true) }

// clearWorker retires the worker's slots at once (queries stop seeing them
// immediately) and then sweeps their entries out in bounded chunks, so
// readers never wait behind an O(index) scan.
func (ix *Index) clearWorker(worker string, remove bool) {
	ix.wmu.Lock()
	ws := ix.workers[worker]
	ix.wmu.Unlock()
	if ws == nil {
		// No real entries, but it may have been predicted.
		ix.mu.Lock()
		ix.pred.dropWorker(worker)
		ix.mu.Unlock()
		return
	}
	ws.mu.Lock()
	ix.mu.Lock()
	var retired []slot
	for dp, s := range ws.slots {
		st := &ix.slots[s]
		for t := range st.held {
			ix.entries[t] -= st.held[t]
		}
		st.dead = true
		ix.deadMask[s>>6] |= 1 << (s & 63)
		ix.deadCount++
		retired = append(retired, s)
		delete(ws.slots, dp)
	}
	ix.counters.clears++
	ix.pred.dropWorker(worker)
	ix.mu.Unlock()
	if remove {
		ix.wmu.Lock()
		if ix.workers[worker] == ws {
			delete(ix.workers, worker)
		}
		ix.wmu.Unlock()
		ws.gone = true
	}
	ws.mu.Unlock()
	if len(retired) > 0 {
		ix.sweep(retired)
	}
}

func (ix *Index) sweep(retired []slot) {
	var mask []uint64
	for _, s := range retired {
		for int(s>>6) >= len(mask) {
			mask = append(mask, 0)
		}
		mask[s>>6] |= 1 << (s & 63)
	}
	for start := 0; ; start += ix.cfg.SweepChunk {
		ix.mu.Lock()
		end := min(start+ix.cfg.SweepChunk, ix.slabLen)
		for i := uint32(start); int(i) < end; i++ {
			n := ix.node(i)
			if n.fl()&fUsed == 0 {
				continue
			}
			n.dev.removeMask(&ix.bits, mask)
			if lo := ix.lower(i, n); lo != nil {
				for t := range lo {
					lo[t].removeMask(&ix.bits, mask)
				}
				ix.dropLowerIfEmpty(i, n)
			}
			if u := ix.unrooted(i, n); u != nil {
				for c := range u {
					u[c].removeMask(&ix.bits, mask)
				}
				ix.dropUIfEmpty(i, n)
			}
			ix.maybeDelete(i, 0) // no hint: the probe starts at home
		}
		done := end >= ix.slabLen
		if done {
			for _, s := range retired {
				ix.slots[s] = slotState{}
				ix.deadMask[s>>6] &^= 1 << (s & 63)
				ix.deadCount--
				ix.freeSlots = append(ix.freeSlots, s)
			}
		}
		ix.mu.Unlock()
		if done {
			return
		}
	}
}

var _ [32 - unsafe.Sizeof(node{})]struct{} // a node must stay within 32 bytes
