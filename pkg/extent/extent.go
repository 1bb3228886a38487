// Package extent lets successive versions of a growing list share one
// array. An agent's next request is its previous one followed by a little
// more, so the next turn's list is the previous turn's with a few elements
// appended. Copying the whole list every turn costs work proportional to
// the history: at 100k tokens, 400 KB per turn. Instead, the next turn
// appends in place, after the previous turn's elements, in the same array.
//
// Only the turn whose list ends exactly where the array is filled to may
// append there. Of two turns that branch from the same list (a retried or
// edited turn, a sub-agent), the first appends and the other copies, so
// that no element a holder can see is ever written again. An Extent is how
// far the array is filled, shared by every view of it; a compare-and-swap
// on it decides who appends.
//
// The holders hand out views capped at their length (s[:n:n]), so that an
// append by a reader copies instead of writing into the shared room.
package extent

import "sync/atomic"

// Extent is how far the holders of one array have filled it: the length
// of the longest view of it, or claimed while one caller appends an
// unknown number of elements (Claim) until it sets the count (Set).
type Extent struct{ used atomic.Int64 }

// claimed marks an extent whose array one caller is appending to.
const claimed = -1

// Extend returns base with room for add more elements, to be appended, and
// the extent of the array they go into: base's own when base ends where
// its array is filled to and the room is there (claimed at once), else a
// new array with headroom for the turns to come. ext may be nil (base's
// array is not shared: it is copied).
func Extend[T any](base []T, ext *Extent, add int) ([]T, *Extent) {
	n := len(base) + add
	if ext != nil && n <= cap(base) && ext.used.CompareAndSwap(int64(len(base)), int64(n)) {
		return base, ext
	}
	return grown(base, n), fresh(int64(n))
}

// Claim returns base to append an unknown number of elements to: in place
// when base ends where its array is filled to, else in a new array with
// room. Either way the extent returned holds the array for the caller
// until it sets the count filled (Set); until then every other Extend or
// Claim of that array copies.
func Claim[T any](base []T, ext *Extent) ([]T, *Extent) {
	if ext != nil && ext.used.CompareAndSwap(int64(len(base)), claimed) {
		return base, ext
	}
	return grown(base, len(base)), fresh(claimed)
}

// Set stores how far the array is filled: after a Claim, to let the next
// list that ends there append; after an Extend, to give back room the
// caller claimed and does not keep (its elements past n are its own copy,
// and a later turn writes over them).
func (e *Extent) Set(n int) { e.used.Store(int64(n)) }

// Used is how far the array is filled (negative while claimed).
func (e *Extent) Used() int { return int(e.used.Load()) }

// grown is a copy of base in a new array with room for n elements and
// headroom past them.
func grown[T any](base []T, n int) []T {
	g := make([]T, len(base), n+n/8+64)
	copy(g, base)
	return g
}

func fresh(used int64) *Extent {
	e := new(Extent)
	e.used.Store(used)
	return e
}
