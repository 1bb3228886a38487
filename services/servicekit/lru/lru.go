// Package lru is a map that holds at most a fixed number of entries and
// forgets the least recently used first: the bound on what a service
// remembers per session, however many sessions pass through it.
package lru

import "container/list"

// Cache maps string keys to values of V, at most max of them. It is not
// safe for concurrent use: its owner locks around it, usually together with
// what it does to the values.
type Cache[V any] struct {
	max   int
	byKey map[string]*list.Element
	order *list.List // front = most recent; values are *entry[V]
}

type entry[V any] struct {
	key string
	val V
}

// New returns an empty cache of at most size entries (at least one).
func New[V any](size int) *Cache[V] {
	return &Cache[V]{max: max(size, 1), byKey: map[string]*list.Element{}, order: list.New()}
}

// Touch returns key's value, a zero V added for a key not held, and makes
// it the most recent; adding one past the bound forgets the least recent.
// The pointer stays valid until the entry is forgotten.
func (c *Cache[V]) Touch(key string) *V {
	if el, ok := c.byKey[key]; ok {
		c.order.MoveToFront(el)
		return &el.Value.(*entry[V]).val
	}
	e := &entry[V]{key: key}
	c.byKey[key] = c.order.PushFront(e)
	for c.order.Len() > c.max {
		old := c.order.Remove(c.order.Back()).(*entry[V])
		delete(c.byKey, old.key)
	}
	return &e.val
}

// Peek returns key's value, nil for a key not held, leaving the order as
// it is: reading an entry does not keep it.
func (c *Cache[V]) Peek(key string) *V {
	if el, ok := c.byKey[key]; ok {
		return &el.Value.(*entry[V]).val
	}
	return nil
}

// Each calls fn with every entry, the most recent first, until fn returns
// false. fn must not Touch.
func (c *Cache[V]) Each(fn func(key string, v *V) bool) {
	for el := c.order.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry[V])
		if !fn(e.key, &e.val) {
			return
		}
	}
}

// Len is how many entries the cache holds.
func (c *Cache[V]) Len() int { return c.order.Len() }
