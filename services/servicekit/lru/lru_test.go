package lru

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// model is the cache written the slow, obvious way: keys most recent
// first, values beside them.
type model struct {
	max  int
	keys []string
	vals map[string]int
}

func (m *model) touch(k string) *int {
	if i := slices.Index(m.keys, k); i >= 0 {
		m.keys = slices.Delete(m.keys, i, i+1)
	} else {
		m.vals[k] = 0
	}
	m.keys = slices.Insert(m.keys, 0, k)
	for len(m.keys) > m.max {
		delete(m.vals, m.keys[len(m.keys)-1])
		m.keys = m.keys[:len(m.keys)-1]
	}
	v := m.vals[k]
	return &v
}

// TestCacheMatchesModel runs random touches, writes and peeks on the cache
// and on the model and compares every answer and the whole order after
// each step.
func TestCacheMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		size := 1 + r.IntN(8)
		c := New[int](size)
		m := &model{max: size, vals: map[string]int{}}
		for step := range 500 {
			k := strconv.Itoa(r.IntN(3 * size))
			switch r.IntN(3) {
			case 0: // touch and write
				n := r.IntN(100)
				*c.Touch(k) = n
				m.touch(k)
				m.vals[k] = n
			case 1: // touch, read
				if got, want := *c.Touch(k), *m.touch(k); got != want {
					t.Fatalf("seed %d step %d: Touch(%s) = %d, want %d", seed, step, k, got, want)
				}
			default:
				got := c.Peek(k)
				want, ok := m.vals[k]
				if (got != nil) != ok || ok && *got != want {
					t.Fatalf("seed %d step %d: Peek(%s) = %v, want %d (held %v)", seed, step, k, got, want, ok)
				}
			}
			var keys []string
			c.Each(func(k string, v *int) bool {
				if *v != m.vals[k] {
					t.Fatalf("seed %d step %d: %s = %d, want %d", seed, step, k, *v, m.vals[k])
				}
				keys = append(keys, k)
				return true
			})
			if !slices.Equal(keys, m.keys) || c.Len() != len(m.keys) {
				t.Fatalf("seed %d step %d: order %v (len %d), want %v", seed, step, keys, c.Len(), m.keys)
			}
		}
	}
}

func TestEachStops(t *testing.T) {
	c := New[int](4)
	for _, k := range []string{"a", "b", "c"} {
		c.Touch(k)
	}
	var seen []string
	c.Each(func(k string, _ *int) bool { seen = append(seen, k); return len(seen) < 2 })
	if !slices.Equal(seen, []string{"c", "b"}) {
		t.Fatalf("Each saw %v, want [c b]", seen)
	}
	one := New[int](0)
	one.Touch("x")
	one.Touch("y")
	if one.Len() != 1 || one.Peek("y") == nil {
		t.Fatalf("a bound below one is one: held %d", one.Len())
	}
}
