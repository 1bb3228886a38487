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

// slotSet is a set of slots in 16 bytes: up to four slots inline (16-bit lanes
// holding slot+1, packed from the low lane, 0 = empty), or a bitset.
type slotSet struct {
	small uint64
	big   *[]uint64
}

func (s *slotSet) empty() bool { return s.big == nil && s.small == 0 }

func (s *slotSet) has(x slot) bool {
	if s.big != nil {
		w := int(x >> 6)
		b := *s.big
		return w < len(b) && b[w]&(1<<(x&63)) != 0
	}
	v := uint64(x) + 1
	for sm := s.small; sm != 0; sm >>= 16 {
		if sm&0xffff == v {
			return true
		}
	}
	return false
}

// add inserts x and reports whether the set changed.
func (s *slotSet) add(x slot) bool {
	if s.big != nil {
		w := int(x >> 6)
		b := *s.big
		if w >= len(b) {
			nb := make([]uint64, w+1)
			copy(nb, b)
			b = nb
			*s.big = b
		}
		m := uint64(1) << (x & 63)
		if b[w]&m != 0 {
			return false
		}
		b[w] |= m
		return true
	}
	if s.has(x) {
		return false
	}
	v := uint64(x) + 1
	for i := 0; i < smallLanes; i++ {
		if (s.small>>(16*i))&0xffff == 0 {
			s.small |= v << (16 * i)
			return true
		}
	}
	// Full: switch to a bitset sized for the largest member.
	maxv := uint64(x)
	for sm := s.small; sm != 0; sm >>= 16 {
		if v := sm&0xffff - 1; v > maxv {
			maxv = v
		}
	}
	b := make([]uint64, maxv/64+1)
	for sm := s.small; sm != 0; sm >>= 16 {
		v := sm&0xffff - 1
		b[v/64] |= 1 << (v & 63)
	}
	b[x>>6] |= 1 << (x & 63)
	s.small = 0
	s.big = &b
	return true
}

// remove deletes x and reports whether the set changed.
func (s *slotSet) remove(x slot) bool {
	if s.big != nil {
		w := int(x >> 6)
		b := *s.big
		m := uint64(1) << (x & 63)
		if w >= len(b) || b[w]&m == 0 {
			return false
		}
		b[w] &^= m
		s.maybeShrink()
		return true
	}
	v := uint64(x) + 1
	for i := 0; i < smallLanes; i++ {
		if (s.small>>(16*i))&0xffff == v {
			lowMask := uint64(1)<<(16*i) - 1
			low := s.small & lowMask
			high := s.small >> (16 * (i + 1))
			if i == smallLanes-1 {
				high = 0
			}
			s.small = low | high<<(16*i)
			return true
		}
	}
	return false
}

// maybeShrink returns a bitset to inline form once it holds two or fewer
// slots (hysteresis against flapping at the four-slot boundary).
func (s *slotSet) maybeShrink() {
	b := *s.big
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
		if n > 2 {
			return
		}
	}
	var sm uint64
	i := 0
	for wi, w := range b {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			w &= w - 1
			sm |= uint64(wi*64+t+1) << (16 * i)
			i++
		}
	}
	s.small = sm
	s.big = nil
}

// removeMask deletes every slot whose bit is set in mask.
func (s *slotSet) removeMask(mask []uint64) {
	if s.big != nil {
		b := *s.big
		for i := range b {
			if i < len(mask) {
				b[i] &^= mask[i]
			}
		}
		s.maybeShrink()
		return
	}
	for sm := s.small; sm != 0; sm >>= 16 {
		v := slot(sm&0xffff - 1)
		if int(v>>6) < len(mask) && mask[v>>6]&(1<<(v&63)) != 0 {
			s.remove(v)
		}
	}
}

// orInto sets the bits of the set's members in dst (len(dst)*64 > every member).
func (s *slotSet) orInto(dst []uint64) {
	if s.big != nil {
		for i, w := range *s.big {
			dst[i] |= w
		}
		return
	}
	for sm := s.small; sm != 0; sm >>= 16 {
		v := sm&0xffff - 1
		dst[v>>6] |= 1 << (v & 63)
	}
}

// andNotInto clears the bits of the set's members in dst.
func (s *slotSet) andNotInto(dst []uint64) {
	if s.big != nil {
		for i, w := range *s.big {
			if i < len(dst) {
				dst[i] &^= w
			}
		}
		return
	}
	for sm := s.small; sm != 0; sm >>= 16 {
		v := sm&0xffff - 1
		if int(v>>6) < len(dst) {
			dst[v>>6] &^= 1 << (v & 63)
		}
	}
}

func (s *slotSet) forEach(f func(slot)) {
	if s.big != nil {
		for wi, w := range *s.big {
			for w != 0 {
				t := bits.TrailingZeros64(w)
				w &= w - 1
				f(slot(wi*64 + t))
			}
		}
		return
	}
	for sm := s.small; sm != 0; sm >>= 16 {
		f(slot(sm&0xffff - 1))
	}
}

func (s *slotSet) len() int {
	if s.big != nil {
		n := 0
		for _, w := range *s.big {
			n += bits.OnesCount64(w)
		}
		return n
	}
	n := 0
	for sm := s.small; sm != 0; sm >>= 16 {
		n++
	}
	return n
}

// heapBytes is the memory the set owns beyond its 16 inline bytes.
func (s *slotSet) heapBytes() int {
	if s.big == nil {
		return 0
	}
	return 24 + 8*cap(*s.big)
}
