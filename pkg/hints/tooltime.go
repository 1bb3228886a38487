package hints

import (
	"slices"
	"time"
)

// toolTimes keeps the most recent tool-call durations in a ring, to tell a
// long tool call from an ordinary one.
type toolTimes struct {
	ring []time.Duration
	next int
	full bool
}

func newToolTimes(n int) *toolTimes { return &toolTimes{ring: make([]time.Duration, n)} }

func (t *toolTimes) add(d time.Duration) {
	if len(t.ring) == 0 || d < 0 {
		return
	}
	t.ring[t.next] = d
	t.next = (t.next + 1) % len(t.ring)
	if t.next == 0 {
		t.full = true
	}
}

func (t *toolTimes) count() int {
	if t.full {
		return len(t.ring)
	}
	return t.next
}

// median of the recorded durations (the lower middle for an even count).
func (t *toolTimes) median() time.Duration {
	n := t.count()
	if n == 0 {
		return 0
	}
	s := slices.Clone(t.ring[:n])
	slices.Sort(s)
	return s[(n-1)/2]
}
