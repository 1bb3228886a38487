package flashindex

import "switchyard.dev/pkg/kv"

// blockTable maps block hashes to node indexes: open addressing with linear
// probing and backward-shift deletion, in one []uint64.
//
// Why not a Go map: the index churns at a steady size (every eviction
// deletes, every store inserts), and the built-in map accumulates tombstones
// under that pattern until lookups probe long runs; backward-shift deletion
// leaves none. And size: each slot is 8 bytes, node index+1 in the low half
// and 32 bits of the mixed hash (the tag) in the high half, so the table stays
// small enough to live in cache while the nodes do not; a lookup costs one
// cache miss, on the node it is about to touch anyway. The home slot is
// derived from the tag alone, so rehashing and backward shifts never read a
// node. Key 0 is never stored (block hash 0 is reserved).
type blockTable struct {
	e      []uint64
	n      int
	shift  uint
	chunks *[][]node // the index's slab, to confirm full hashes
}

const tableMinBits = 10

func (t *blockTable) init(bitsLog uint) {
	t.e = make([]uint64, 1<<bitsLog)
	t.shift = 64 - bitsLog
	t.n = 0
}

// tagOf mixes the whole key (murmur3's finaliser) before taking 32 bits, so
// keys that are not uniform hashes (small integers, engine ids with zero
// high bits) still spread over the table.
func tagOf(k kv.BlockHash) uint64 {
	x := uint64(k)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x >> 32
}

func (t *blockTable) home(tag uint64) uint64 {
	return ((tag + 1) * 0x9e3779b97f4a7c15) >> t.shift
}

func (t *blockTable) hashAt(idx uint32) kv.BlockHash {
	return (*t.chunks)[idx>>chunkBits][idx&(chunkSize-1)].hash
}

// find returns the slot holding k (whose tag is tagOf(k)) and true, or the
// empty slot that ends k's probe run and false. The table must be allocated.
func (t *blockTable) find(k kv.BlockHash, tag uint64) (uint64, bool) {
	mask := uint64(len(t.e) - 1)
	for i := t.home(tag); ; i = (i + 1) & mask {
		e := t.e[i]
		if e == 0 {
			return i, false
		}
		if e>>32 == tag && t.hashAt(uint32(e)-1) == k {
			return i, true
		}
	}
}

func (t *blockTable) get(k kv.BlockHash) (uint32, bool) {
	if t.e == nil {
		return 0, false
	}
	i, ok := t.find(k, tagOf(k))
	if !ok {
		return 0, false
	}
	return uint32(t.e[i]) - 1, true
}

// touch loads the home slot of every tag, and the slot two after it (on the
// next cache line when home is one of its last two slots: probes and
// backward shifts rarely go further), with no branch on what it loads. The
// CPU then has all of these (mostly uncached) loads in flight at once, and
// the probes that follow find their slots in cache instead of each waiting
// alone for memory. The result only keeps the loads from being optimised
// away.
func (t *blockTable) touch(tags []uint64) uint64 {
	if t.e == nil {
		return 0
	}
	mask := uint64(len(t.e) - 1)
	var sum uint64
	for _, tag := range tags {
		h := t.home(tag)
		sum += t.e[h] + t.e[(h+2)&mask]
	}
	return sum
}

// reserve grows the table, if needed, so that n more keys fit under its load
// limit (7/8: keys are uniform, runs stay short). Slots found empty then stay
// where they are until filled.
func (t *blockTable) reserve(n int) {
	if t.e == nil {
		t.init(tableMinBits)
	}
	for (t.n+n)*8 > len(t.e)*7 {
		t.grow()
	}
}

// insertAt maps the key with tag to node idx in slot pos: the empty slot find
// returned for it, with room reserved and no insertion since.
func (t *blockTable) insertAt(pos, tag uint64, idx uint32) {
	t.e[pos] = tag<<32 | uint64(idx+1)
	t.n++
}

func (t *blockTable) insert(e uint64) {
	mask := uint64(len(t.e) - 1)
	for i := t.home(e >> 32); ; i = (i + 1) & mask {
		if t.e[i] == 0 {
			t.e[i] = e
			return
		}
	}
}

func (t *blockTable) grow() {
	old, n := t.e, t.n
	t.init(64 - t.shift + 1)
	t.n = n
	for _, e := range old {
		if e != 0 {
			t.insert(e)
		}
	}
}

// del removes the mapping to node idx, whose key has tag. It matches the node
// index rather than the key, so it never reads a node. hint is a slot that
// may hold the mapping (where a lookup found it, if no deletion since moved
// it); the probe starts at home otherwise.
func (t *blockTable) del(tag uint64, idx uint32, hint uint64) {
	if t.e == nil {
		return
	}
	mask := uint64(len(t.e) - 1)
	want := tag<<32 | uint64(idx+1)
	hole := hint & mask
	if t.e[hole] != want {
		hole = t.home(tag)
	}
	for t.e[hole] != want {
		if t.e[hole] == 0 {
			return
		}
		hole = (hole + 1) & mask
	}
	t.n--
	j := hole
	// Backward shift: pull later entries of the run into the hole unless
	// their home lies cyclically in (hole, j].
	for {
		t.e[hole] = 0
		for {
			j = (j + 1) & mask
			if t.e[j] == 0 {
				return
			}
			h := t.home(t.e[j] >> 32)
			if (j > hole && (h <= hole || h > j)) || (j < hole && h <= hole && h > j) {
				break
			}
		}
		t.e[hole] = t.e[j]
		hole = j
	}
}

func (t *blockTable) len() int { return t.n }

func (t *blockTable) bytes() int { return len(t.e) * 8 }
