// Package basecache holds the latest prompts (or their block-hash chains) a
// service was sent, whole, so that a session's next request may name the
// previous one's leading blocks and send only what follows. An agent's turn
// resends its whole growing context: at 100k tokens that is 400 KB of token
// ids and 50 KB of block hashes a turn, nearly all of which the same
// receiver was sent one turn earlier.
//
// A prompt is named by its key: its last full block's sequence hash, which
// covers every token before it (and the tenant's cache salt). A request
// names a base (a key and how many of its leading blocks it repeats); a
// receiver that no longer holds the base answers so (ErrBaseNotHeld, in its
// protocol's NOT_FOUND), and the sender sends the request whole.
//
// The engine shim keeps whole prompts (token ids and hashes) for
// GenerateRequest.base; the scheduler and the flash indexers keep hash
// chains (Chains) for RouteRequest.base and FindMatches' base.
package basecache

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
)

// ErrBaseNotHeld answers a request whose base this receiver does not hold
// (forgotten, never sent here, or kept for another tenant): its sender
// then sends it whole.
var ErrBaseNotHeld = errors.New("base not held")

// Store keeps values by key, bounded by their total size, and forgets the
// least recently used first, except that a value that newer kept ones were
// built on, by every put that kept it, goes first of all: its sessions name
// the newer ones next, and a base left where its use put it (at the front)
// made every session hold two, pushing out other sessions' only one (in the
// hot-path benchmark at 100k tokens, eight sessions on four shims, one turn
// in six was answered NOT_FOUND and sent again whole).
type Store[V any] struct {
	mu    sync.Mutex
	max   int
	used  int
	size  func(V) int
	byKey map[uint64]*list.Element
	order *list.List // front = most recent; values are *entry[V]
}

type entry[V any] struct {
	key   uint64
	value V
	// holders is how many puts kept this value that no later put built on
	// it has superseded: sessions whose prompts are the same bytes
	// (fanned-out sub-agents, best-of-n) share one.
	holders int
}

// NewStore keeps values of up to max in total size; nil (none kept) for
// max 0.
func NewStore[V any](max int, size func(V) int) *Store[V] {
	if max <= 0 {
		return nil
	}
	return &Store[V]{max: max, size: size, byKey: map[uint64]*list.Element{}, order: list.New()}
}

// Get returns key's value, moving it to the front when accept (which runs
// under the store's lock) takes it. It fails with ErrBaseNotHeld, wrapped,
// when the key is not held (forgotten, never kept here, or kept by a
// process since restarted), and with accept's error otherwise.
func (s *Store[V]) Get(key uint64, accept func(V) error) (V, error) {
	var none V
	if s == nil {
		return none, fmt.Errorf("%w: nothing is kept here", ErrBaseNotHeld)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key]
	if !ok {
		return none, fmt.Errorf("%w: %016x is not kept here (forgotten, or never sent here)", ErrBaseNotHeld, key)
	}
	e := el.Value.(*entry[V])
	if err := accept(e.value); err != nil {
		return none, err
	}
	s.order.MoveToFront(el)
	return e.value, nil
}

// Put keeps value under key and reports whether it did (not when it is
// larger than the whole store). builtOn is the key of the base value was
// expanded from (0: none), which it supersedes: once no put that kept the
// base is left unsuperseded, the base moves behind every other value, still
// there for a retry of the same turn while nothing else needs the room.
func (s *Store[V]) Put(key uint64, value V, builtOn uint64) bool {
	if s == nil || s.size(value) > s.max {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var base *entry[V] // the value this one supersedes, if still kept
	if el, ok := s.byKey[builtOn]; ok && builtOn != key {
		base = el.Value.(*entry[V])
	}
	holders := 1
	if el, ok := s.byKey[key]; ok {
		old := el.Value.(*entry[V])
		s.used -= s.size(old.value)
		holders = old.holders + 1
		// The same turn again (a prompt that adds less than a block to its
		// base is its base; a retry finds its base superseded already): no
		// new holder.
		if builtOn == key || base != nil && base.holders == 0 {
			holders = max(old.holders, 1)
		}
		s.order.Remove(el)
	}
	s.byKey[key] = s.order.PushFront(&entry[V]{key: key, value: value, holders: holders})
	s.used += s.size(value)
	if base != nil && base.holders > 0 {
		if base.holders--; base.holders == 0 {
			s.order.MoveToBack(s.byKey[builtOn])
		}
	}
	for s.used > s.max {
		old := s.order.Remove(s.order.Back()).(*entry[V])
		delete(s.byKey, old.key)
		s.used -= s.size(old.value)
	}
	return true
}

// Used is the total size of the values kept.
func (s *Store[V]) Used() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}
