package enginesim

import "switchyard.dev/pkg/kv"

// tierStore is a lower tier (host or disk): a fixed number of slots holding
// block hashes in LRU order. It models residency only; the simulated engine
// never needs the bytes.
type tierStore struct {
	tier    kv.Tier
	hash    []kv.BlockHash
	parent  []kv.BlockHash
	pos     []int32
	session []int32
	// LRU links; index len(hash) is the sentinel; head = least recently used.
	prev, next []int32
	free       []int32 // unused slots
	bySlot     hashIndex
}

func newTierStore(t kv.Tier, n int) *tierStore {
	s := &tierStore{
		tier:    t,
		hash:    make([]kv.BlockHash, n),
		parent:  make([]kv.BlockHash, n),
		pos:     make([]int32, n),
		session: make([]int32, n),
		prev:    make([]int32, n+1),
		next:    make([]int32, n+1),
		free:    make([]int32, 0, n),
		bySlot:  newHashIndex(n),
	}
	s.prev[n], s.next[n] = int32(n), int32(n)
	for i := n - 1; i >= 0; i-- {
		s.free = append(s.free, int32(i))
	}
	return s
}

func (s *tierStore) capacity() int { return len(s.hash) }
func (s *tierStore) resident() int { return s.bySlot.len() }

func (s *tierStore) has(h kv.BlockHash) bool {
	if s == nil {
		return false
	}
	return s.bySlot.has(h)
}

func (s *tierStore) link(i int32) {
	n := int32(len(s.hash))
	last := s.prev[n]
	s.prev[i], s.next[i] = last, n
	s.next[last] = i
	s.prev[n] = i
}

func (s *tierStore) unlink(i int32) {
	s.next[s.prev[i]] = s.next[i]
	s.prev[s.next[i]] = s.prev[i]
}

// touch marks h most recently used; it reports whether h is resident.
func (s *tierStore) touch(h kv.BlockHash) bool {
	i, ok := s.bySlot.get(h)
	if ok {
		s.unlink(i)
		s.link(i)
	}
	return ok
}

// lru is the least recently used slot, or -1 when empty.
func (s *tierStore) lru() int32 {
	n := int32(len(s.hash))
	if f := s.next[n]; f != n {
		return f
	}
	return -1
}

// insert stores h (which must not be resident) in a free slot; the caller
// evicts first when the tier is full.
func (s *tierStore) insert(h, parent kv.BlockHash, pos, session int32) {
	i := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.hash[i], s.parent[i], s.pos[i], s.session[i] = h, parent, pos, session
	s.bySlot.put(h, i)
	s.link(i)
}

func (s *tierStore) full() bool { return len(s.free) == 0 }

// remove drops h; it reports whether h was resident.
func (s *tierStore) remove(h kv.BlockHash) bool {
	i, ok := s.bySlot.get(h)
	if !ok {
		return false
	}
	s.unlink(i)
	s.bySlot.del(h)
	s.free = append(s.free, i)
	return true
}

// clear drops everything.
func (s *tierStore) clear() {
	n := len(s.hash)
	*s = *newTierStore(s.tier, n)
}
