package hints

import (
	"slices"
	"time"
)

// toolTimes keeps the most recent tool-call durations in a ring, to tell a
// long tool call from an ordinary one. The same samples are kept in order
// too: the median is asked for every acting program at every tick and by
// every stats read, and sorting the ring each time was about a quarter of
// the hint emitter's CPU in the mesh's 2k-token turn profile.
type toolTimes struct {
	ring   []time.Duration
	next   int
	sorted []time.Duration // the ring's samples, in order; all len(ring) once it is full
}

func newToolTimes(n int) *toolTimes {
	return &toolTimes{ring: make([]time.Duration, n), sorted: make([]time.Duration, 0, n)}
}

func (t *toolTimes) add(d time.Duration) {
	if len(t.ring) == 0 || d < 0 {
		return
	}
	if len(t.sorted) == len(t.ring) { // full: the oldest sample leaves
		old, _ := slices.BinarySearch(t.sorted, t.ring[t.next])
		t.sorted = slices.Delete(t.sorted, old, old+1)
	}
	at, _ := slices.BinarySearch(t.sorted, d)
	t.sorted = slices.Insert(t.sorted, at, d)
	t.ring[t.next] = d
	t.next = (t.next + 1) % len(t.ring)
}

func (t *toolTimes) count() int { return len(t.sorted) }

// median is the lower median of the samples, 0 when there are none.
func (t *toolTimes) median() time.Duration {
	n := len(t.sorted)
	if n == 0 {
		return 0
	}
	return t.sorted[(n-1)/2]
}
