package tokenizer

import "math/bits"

// vocabTable maps token bytes to ids. It replaces a map[string]uint32 on the
// hot path: lookups of short substrings are most of BPE's work. Slots are
// open-addressed; a token of up to 8 bytes is stored in its slot, so a
// lookup of a short string touches one cache line and never the token
// table; longer tokens keep a hash in the slot and are compared against
// tokens[id]. It is about twice as fast as Go's map here and ten times
// faster to build (the build is most of Default's start-up).
type vocabTable struct {
	slots  []slot
	mask   uint64
	tokens []string // id → bytes
	// pair holds the id of every two-byte token (noRank if none): BPE starts
	// by ranking every adjacent byte pair of a piece.
	pair []uint32
	// single holds the id of each one-byte token.
	single [256]uint32
}

type slot struct {
	key  uint64 // the token's bytes, little-endian, if len ≤ 8; else its hash
	meta uint64 // len << 32 | (id + 1); 0 = empty
}

func newVocabTable(tokens []string, ids []uint32) vocabTable {
	n := 1 << bits.Len(uint(2*len(ids)))
	v := vocabTable{slots: make([]slot, n), mask: uint64(n - 1), tokens: tokens, pair: make([]uint32, 1<<16)}
	for i := range v.pair {
		v.pair[i] = noRank
	}
	for i := range v.single {
		v.single[i] = noRank
	}
	for _, id := range ids {
		s := tokens[id]
		key, h := keyHash(s)
		i := h & v.mask
		for v.slots[i].meta != 0 {
			i = (i + 1) & v.mask
		}
		v.slots[i] = slot{key: key, meta: uint64(len(s))<<32 | uint64(id+1)}
		switch len(s) {
		case 1:
			v.single[s[0]] = id
		case 2:
			v.pair[uint16(s[0])<<8|uint16(s[1])] = id
		}
	}
	return v
}

// lookup returns the id of the token whose bytes are s.
func (v *vocabTable) lookup(s string) (uint32, bool) {
	key, h := keyHash(s)
	want := uint64(len(s)) << 32
	for i := h & v.mask; ; i = (i + 1) & v.mask {
		e := &v.slots[i]
		if e.meta == 0 {
			return 0, false
		}
		if e.key == key && e.meta&^0xFFFFFFFF == want {
			id := uint32(e.meta) - 1
			if len(s) <= 8 || v.tokens[id] == s {
				return id, true
			}
		}
	}
}

// keyHash returns the slot key of s (its bytes if it is short, else its
// hash) and the hash that picks its first slot.
func keyHash(s string) (key, h uint64) {
	if len(s) <= 8 {
		var w uint64
		for i := 0; i < len(s); i++ {
			w |= uint64(s[i]) << (8 * i)
		}
		h = (w ^ uint64(len(s))*hashMul1) * hashMul2
		h ^= h >> 32
		return w, h
	}
	h = hashString(s)
	return h, h
}

const (
	hashMul1 = 0x9E3779B97F4A7C15
	hashMul2 = 0xC2B2AE3D27D4EB4F
)

// hashString is a small multiply-xorshift hash; it need not resist attacks
// because the table's keys are fixed (only lookups see user text, and a
// lookup probes at most one cluster).
func hashString(s string) uint64 {
	h := uint64(len(s)) * hashMul1
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = (h ^ w) * hashMul2
		h ^= h >> 31
		s = s[8:]
	}
	var w uint64
	for i := 0; i < len(s); i++ {
		w |= uint64(s[i]) << (8 * i)
	}
	h = (h ^ w) * hashMul2
	h ^= h >> 29
	h *= hashMul1
	h ^= h >> 32
	return h
}
