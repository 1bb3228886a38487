package adapter

import "testing"

// A replay must hold every sequence up to the live batch that called for it,
// wherever a hole falls; only what follows the last hole may be applied.
func TestLastHole(t *testing.T) {
	seqs := func(ss ...uint64) []seqPayload {
		out := make([]seqPayload, len(ss))
		for i, s := range ss {
			out[i] = seqPayload{seq: s}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		got        []seqPayload
		from, live uint64
		strict     bool
		start      int
		hole       bool
	}{
		{"gap filled", seqs(5, 6, 7), 5, 8, true, 0, false},
		{"gap filled and more published since", seqs(5, 6, 7, 8, 9), 5, 7, true, 0, false},
		{"a hole past the live batch is none", seqs(5, 6, 8), 5, 7, true, 0, false},
		{"joining: a hole at the live batch is none", seqs(3, 4, 6), 0, 5, false, 0, false},
		{"start no longer buffered", seqs(6, 7), 5, 8, true, 0, true},
		{"nothing buffered", nil, 5, 8, true, 0, true},
		{"hole in the middle", seqs(5, 6, 8, 9), 5, 10, true, 2, true},
		{"two holes: after the last", seqs(5, 7, 9), 5, 10, true, 2, true},
		{"ends before the live batch", seqs(5, 6), 5, 8, true, 2, true},
		{"joining: history from anywhere", seqs(3, 4), 0, 5, false, 0, false},
		{"joining: no history", nil, 0, 5, false, 0, false},
		{"joining: hole in the middle", seqs(3, 5), 0, 6, false, 1, true},
		{"joining: ends before the live batch", seqs(3), 0, 6, false, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, err := lastHole(beforeLive(tc.got, tc.live), tc.from, tc.live, tc.strict)
			if start != tc.start || (err != nil) != tc.hole {
				t.Fatalf("start %d, err %v; want start %d, hole %v", start, err, tc.start, tc.hole)
			}
		})
	}
}
