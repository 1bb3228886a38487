package enginesim

import (
	"math/bits"

	"switchyard.dev/pkg/kv"
)

// hashIndex maps block hashes to int32 slots: open addressing with linear
// probing and backward-shift deletion, sized once for a fixed capacity. It
// replaces a Go map in the per-block hot path (every filled and every evicted
// block touches it), where it is several times faster, and its iteration
// order is deterministic.
type hashIndex struct {
	slots []hashSlot // key and value side by side: one cache miss per probe
	shift uint8
	mask  uint64
	n     int
}

type hashSlot struct {
	key kv.BlockHash
	val int32 // < 0: empty
}

func newHashIndex(capacity int) hashIndex {
	size := 16
	for size < 2*capacity {
		size *= 2
	}
	t := hashIndex{
		slots: make([]hashSlot, size),
		shift: uint8(64 - bits.TrailingZeros(uint(size))),
		mask:  uint64(size - 1),
	}
	for i := range t.slots {
		t.slots[i].val = -1
	}
	return t
}

// home is the preferred slot of h. Fibonacci hashing spreads keys that are
// not uniformly random (tests use small numbers).
func (t *hashIndex) home(h kv.BlockHash) uint64 {
	return (uint64(h) * 0x9e3779b97f4a7c15) >> t.shift
}

func (t *hashIndex) len() int { return t.n }

func (t *hashIndex) find(h kv.BlockHash) (uint64, bool) {
	for i := t.home(h); ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.val < 0 {
			return i, false
		}
		if sl.key == h {
			return i, true
		}
	}
}

// touch loads h's home slot and returns a value the caller must keep (add
// it to a field), so that the load is not optimized away: a prefetch, for
// loops that will probe many random slots.
func (t *hashIndex) touch(h kv.BlockHash) int32 {
	return t.slots[t.home(h)].val
}

func (t *hashIndex) get(h kv.BlockHash) (int32, bool) {
	i, ok := t.find(h)
	if !ok {
		return -1, false
	}
	return t.slots[i].val, true
}

func (t *hashIndex) has(h kv.BlockHash) bool {
	_, ok := t.find(h)
	return ok
}

// put inserts h → v; it reports false (and changes nothing) when h is
// present. The table never holds more than its capacity, so it never fills.
func (t *hashIndex) put(h kv.BlockHash, v int32) bool {
	i, ok := t.find(h)
	if ok {
		return false
	}
	t.slots[i] = hashSlot{key: h, val: v}
	t.n++
	return true
}

// del removes h, shifting later entries of its probe run back so lookups
// never need tombstones.
func (t *hashIndex) del(h kv.BlockHash) bool {
	i, ok := t.find(h)
	if !ok {
		return false
	}
	for j := (i + 1) & t.mask; t.slots[j].val >= 0; j = (j + 1) & t.mask {
		k := t.home(t.slots[j].key)
		// The entry at j may move to i unless its home lies cyclically in
		// (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i].val = -1
	t.n--
	return true
}

// each calls f for every entry, in table order (deterministic).
func (t *hashIndex) each(f func(h kv.BlockHash, v int32)) {
	for _, sl := range t.slots {
		if sl.val >= 0 {
			f(sl.key, sl.val)
		}
	}
}
