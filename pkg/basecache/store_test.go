package basecache

import (
	"errors"
	"testing"
)

func held(s *Store[[]int], key uint64) bool {
	_, err := s.Get(key, func([]int) error { return nil })
	return err == nil
}

// The least recently used goes first, except that a value superseded by
// every put that kept it goes before any other; a value as large as the
// whole store is kept, a larger one is not.
func TestStoreForgetsSupersededThenLeastRecent(t *testing.T) {
	s := NewStore(12, func(v []int) int { return len(v) })
	s.Put(1, make([]int, 4), 0)
	s.Put(2, make([]int, 4), 0)
	s.Put(3, make([]int, 4), 0)
	held(s, 1)                  // 1 is now the most recent
	s.Put(4, make([]int, 4), 0) // past the room: 2, the least recent, goes
	if held(s, 2) || !held(s, 1) || !held(s, 3) || !held(s, 4) || s.Used() != 12 {
		t.Fatalf("after the first eviction: 2 held %v, used %d", held(s, 2), s.Used())
	}
	// 5 is built on 1, which nothing else holds: 1 goes next, though 3 is
	// less recent.
	s.Put(5, make([]int, 4), 1)
	if held(s, 1) || !held(s, 3) {
		t.Fatalf("superseded 1 held %v, least recent 3 held %v", held(s, 1), held(s, 3))
	}
	// A value built on a base two puts kept (the same bytes, two sessions)
	// leaves the base where it is: the other session names it next.
	s.Put(6, make([]int, 2), 0)
	s.Put(6, make([]int, 2), 0)
	s.Put(7, make([]int, 2), 6)
	s.Put(8, make([]int, 4), 0)
	if !held(s, 6) {
		t.Fatal("a base one of its two holders still names was forgotten first")
	}
	if !s.Put(9, make([]int, 12), 0) || s.Put(10, make([]int, 13), 0) || held(s, 10) {
		t.Fatal("a value as large as the store was refused, or a larger one kept")
	}
	var none *Store[[]int]
	if _, err := none.Get(1, func([]int) error { return nil }); !errors.Is(err, ErrBaseNotHeld) || none.Put(1, nil, 0) || none.Used() != 0 {
		t.Fatal("a nil store holds something")
	}
}

// accept refuses without moving the value to the front.
func TestStoreGetRefusedDoesNotTouch(t *testing.T) {
	s := NewStore(8, func(v []int) int { return len(v) })
	s.Put(1, make([]int, 4), 0)
	s.Put(2, make([]int, 4), 0)
	wrong := errors.New("another tenant's")
	if _, err := s.Get(1, func([]int) error { return wrong }); !errors.Is(err, wrong) {
		t.Fatalf("refused get: %v", err)
	}
	s.Put(3, make([]int, 4), 0) // 1 is still the least recent
	if held(s, 1) || !held(s, 2) {
		t.Fatal("a refused Get moved its value to the front")
	}
}
