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

// find returns the slot holding k, or -1.
func (t *blockTable) find(k kv.BlockHash) int {
	if t.e == nil {
		return -1
	}
	tag := tagOf(k)
	mask := uint64(len(t.e) - 1)
	for i := t.home(tag); ; i = (i + 1) & mask {
		e := t.e[i]
		if e == 0 {
			return -1
		}
		if e>>32 == tag && t.hashAt(uint32(e)-1) == k {
			return int(i)
		}
	}
}

func (t *blockTable) get(k kv.BlockHash) (uint32, bool) {
	i := t.find(k)
	if i < 0 {
		return 0, false
	}
	return uint32(t.e[i]) - 1, true
}

// put inserts k → idx; k must not be present and node idx must already
// carry hash k.
func (t *blockTable) put(k kv.BlockHash, idx uint32) {
	if t.e == nil {
		t.init(tableMinBits)
	}
	if (t.n+1)*8 > len(t.e)*7 { // load ≤ 7/8: keys are uniform, runs stay short
		t.grow()
	}
	t.insert(tagOf(k)<<32 | uint64(idx+1))
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

func (t *blockTable) del(k kv.BlockHash) {
	i := t.find(k)
	if i < 0 {
		return
	}
	t.n--
	mask := uint64(len(t.e) - 1)
	hole := uint64(i)
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
