package flashindex

import "math/bits"

// slot is a dense id for one (worker, dp rank) pair. Lanes of slotSet store
// slot+1 in 16 bits, so at most maxSlots pairs can be live at once.
type slot = uint16

const maxSlots = 1<<16 - 2

// smallLanes is how many holders slotSet keeps inline before switching to a
// bitset. Four covers the common case (a block held by one to four workers)
// without an allocation; widely shared blocks (system prompts) pay one bitset
// that is amortised over all of its holders.
const smallLanes = 4

// bigLane in the low lane marks a set kept as a bitset in the index's
// bitsets, numbered by the upper 48 bits. No slot+1 is 0xffff.
const bigLane = 0xffff

// slotSet is a set of slots in 8 bytes: up to four slots inline (16-bit lanes
// holding slot+1, packed from the low lane, 0 = empty), or the number of a
// bitset in a bitsets store. Holding no pointer is what keeps the node slab
// out of the garbage collector's scans and a node at 32 bytes.
type slotSet struct{ v uint64 }

// bitsets stores the slot sets too large to be inline. A set keeps at least
// three members (it shrinks back inline at two), so an empty set never holds
// a bitset and the only release is in maybeShrink.
type bitsets struct {
	sets [][]uint64
	free []uint64
}

func (b *bitsets) alloc(words []uint64) uint64 {
	if n := len(b.free); n > 0 {
		id := b.free[n-1]
		b.free = b.free[:n-1]
		b.sets[id] = words
		return id
	}
	b.sets = append(b.sets, words)
	return uint64(len(b.sets) - 1)
}

func (b *bitsets) release(id uint64) {
	b.sets[id] = nil
	b.free = append(b.free, id)
}

// bytes is the memory the store holds.
func (b *bitsets) bytes() int {
	n := 24*cap(b.sets) + 8*cap(b.free)
	for _, ws := range b.sets {
		n += 8 * cap(ws)
	}
	return n
}

func (s *slotSet) isBig() bool { return s.v&0xffff == bigLane }

// words returns the bitset of a big set.
func (s *slotSet) words(b *bitsets) []uint64 { return b.sets[s.v>>16] }

func (s *slotSet) empty() bool { return s.v == 0 }

func (s *slotSet) has(b *bitsets, x slot) bool {
	if s.isBig() {
		w := int(x >> 6)
		ws := s.words(b)
		return w < len(ws) && ws[w]&(1<<(x&63)) != 0
	}
	v := uint64(x) + 1
	for sm := s.v; sm != 0; sm >>= 16 {
		if sm&0xffff == v {
			return true
		}
	}
	return false
}

// add inserts x and reports whether the set changed.
func (s *slotSet) add(b *bitsets, x slot) bool {
	if s.isBig() {
		w := int(x >> 6)
		ws := s.words(b)
		if w >= len(ws) {
			nw := make([]uint64, w+1)
			copy(nw, ws)
			ws = nw
			b.sets[s.v>>16] = ws
		}
		m := uint64(1) << (x & 63)
		if ws[w]&m != 0 {
			return false
		}
		ws[w] |= m
		return true
	}
	if s.has(b, x) {
		return false
	}
	v := uint64(x) + 1
	for i := 0; i < smallLanes; i++ {
		if (s.v>>(16*i))&0xffff == 0 {
			s.v |= v << (16 * i)
			return true
		}
	}
	// Full: switch to a bitset sized for the largest member.
	maxv := uint64(x)
	for sm := s.v; sm != 0; sm >>= 16 {
		if v := sm&0xffff - 1; v > maxv {
			maxv = v
		}
	}
	ws := make([]uint64, maxv/64+1)
	for sm := s.v; sm != 0; sm >>= 16 {
		v := sm&0xffff - 1
		ws[v/64] |= 1 << (v & 63)
	}
	ws[x>>6] |= 1 << (x & 63)
	s.v = b.alloc(ws)<<16 | bigLane
	return true
}

// remove deletes x and reports whether the set changed.
func (s *slotSet) remove(b *bitsets, x slot) bool {
	if s.isBig() {
		w := int(x >> 6)
		ws := s.words(b)
		m := uint64(1) << (x & 63)
		if w >= len(ws) || ws[w]&m == 0 {
			return false
		}
		ws[w] &^= m
		s.maybeShrink(b)
		return true
	}
	v := uint64(x) + 1
	for i := 0; i < smallLanes; i++ {
		if (s.v>>(16*i))&0xffff == v {
			lowMask := uint64(1)<<(16*i) - 1
			low := s.v & lowMask
			high := s.v >> (16 * (i + 1))
			if i == smallLanes-1 {
				high = 0
			}
			s.v = low | high<<(16*i)
			return true
		}
	}
	return false
}

// maybeShrink returns a bitset to inline form once it holds two or fewer
// slots (hysteresis against flapping at the four-slot boundary).
func (s *slotSet) maybeShrink(b *bitsets) {
	ws := s.words(b)
	n := 0
	for _, w := range ws {
		n += bits.OnesCount64(w)
		if n > 2 {
			return
		}
	}
	var sm uint64
	i := 0
	for wi, w := range ws {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			w &= w - 1
			sm |= uint64(wi*64+t+1) << (16 * i)
			i++
		}
	}
	b.release(s.v >> 16)
	s.v = sm
}

// removeMask deletes every slot whose bit is set in mask.
func (s *slotSet) removeMask(b *bitsets, mask []uint64) {
	if s.isBig() {
		ws := s.words(b)
		for i := range ws {
			if i < len(mask) {
				ws[i] &^= mask[i]
			}
		}
		s.maybeShrink(b)
		return
	}
	for sm := s.v; sm != 0; sm >>= 16 {
		v := slot(sm&0xffff - 1)
		if int(v>>6) < len(mask) && mask[v>>6]&(1<<(v&63)) != 0 {
			s.remove(b, v)
		}
	}
}

// orInto sets the bits of the set's members in dst (len(dst)*64 > every member).
func (s *slotSet) orInto(b *bitsets, dst []uint64) {
	if s.isBig() {
		for i, w := range s.words(b) {
			dst[i] |= w
		}
		return
	}
	for sm := s.v; sm != 0; sm >>= 16 {
		v := sm&0xffff - 1
		dst[v>>6] |= 1 << (v & 63)
	}
}

// andNotInto clears the bits of the set's members in dst.
func (s *slotSet) andNotInto(b *bitsets, dst []uint64) {
	if s.isBig() {
		for i, w := range s.words(b) {
			if i < len(dst) {
				dst[i] &^= w
			}
		}
		return
	}
	for sm := s.v; sm != 0; sm >>= 16 {
		v := sm&0xffff - 1
		if int(v>>6) < len(dst) {
			dst[v>>6] &^= 1 << (v & 63)
		}
	}
}

func (s *slotSet) forEach(b *bitsets, f func(slot)) {
	if s.isBig() {
		for wi, w := range s.words(b) {
			for w != 0 {
				t := bits.TrailingZeros64(w)
				w &= w - 1
				f(slot(wi*64 + t))
			}
		}
		return
	}
	for sm := s.v; sm != 0; sm >>= 16 {
		f(slot(sm&0xffff - 1))
	}
}
