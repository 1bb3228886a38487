package tokenizer

// Rank BPE: repeatedly merge the adjacent pair whose concatenation is the
// token with the lowest id, leftmost first, until no adjacent pair forms a
// token. For vocabularies whose merges are listed in id order (checked by
// Load), this is exactly Hugging Face's merge-rank BPE, without needing the
// merge table: the vocabulary is the merge table.

const noRank = ^uint32(0)

// largePiece is the piece length from which the heap-based merge is used;
// below it the quadratic scan over a small array is faster.
const largePiece = 256

// scratch holds the buffers one Encode call reuses across pieces.
type scratch struct {
	parts []part
	next  []int32
	prev  []int32
	dead  []bool
	heap  []uint64
}

type part struct {
	start int32
	rank  uint32 // rank of the pair starting here, noRank if none
}

func (t *bpeTokenizer) rank(s string) uint32 {
	if id, ok := t.ranks.lookup(s); ok {
		return id
	}
	return noRank
}

// appendPiece appends the ids of one pre-token.
func (t *bpeTokenizer) appendPiece(out []uint32, p string, sc *scratch) []uint32 {
	if id, ok := t.ranks.lookup(p); ok {
		return append(out, id)
	}
	if len(p) >= largePiece {
		return t.mergeLarge(out, p, sc)
	}
	return t.mergeSmall(out, p, sc)
}

// mergeSmall is the O(n²) merge over an array of part boundaries.
func (t *bpeTokenizer) mergeSmall(out []uint32, p string, sc *scratch) []uint32 {
	n := len(p)
	parts := sc.parts[:0]
	for i := 0; i <= n; i++ {
		parts = append(parts, part{int32(i), noRank})
	}
	for i := 0; i+2 <= n; i++ {
		parts[i].rank = t.ranks.pair[uint16(p[i])<<8|uint16(p[i+1])]
	}
	pairRank := func(i int) uint32 {
		if i+2 < len(parts) {
			return t.rank(p[parts[i].start:parts[i+2].start])
		}
		return noRank
	}
	for len(parts) > 2 {
		best, at := noRank, -1
		for i := 0; i < len(parts)-2; i++ {
			if parts[i].rank < best {
				best, at = parts[i].rank, i
			}
		}
		if at < 0 {
			break
		}
		parts = append(parts[:at+1], parts[at+2:]...)
		parts[at].rank = pairRank(at)
		if at > 0 {
			parts[at-1].rank = pairRank(at - 1)
		}
	}
	for i := 0; i+1 < len(parts); i++ {
		out = append(out, t.rank(p[parts[i].start:parts[i+1].start]))
	}
	sc.parts = parts
	return out
}

// mergeLarge is the O(n log n) merge for long pieces (a run of thousands of
// letters or symbols would make mergeSmall quadratic). Symbols form a linked
// list over byte offsets; candidate pairs sit in a min-heap keyed by
// (rank, start), the same order mergeSmall picks them in. Entries made stale
// by earlier merges are recognised on pop: token ids fix token lengths, so a
// pair is current iff its left symbol is alive and the pair spans exactly the
// bytes of the token.
func (t *bpeTokenizer) mergeLarge(out []uint32, p string, sc *scratch) []uint32 {
	n := len(p)
	next, prev, dead := grow(sc.next, n), grow(sc.prev, n), growBool(sc.dead, n)
	h := sc.heap[:0]
	for i := 0; i < n; i++ {
		next[i], prev[i], dead[i] = int32(i+1), int32(i-1), false
		if i+1 < n {
			if r := t.ranks.pair[uint16(p[i])<<8|uint16(p[i+1])]; r != noRank {
				h = heapPush(h, uint64(r)<<32|uint64(i))
			}
		}
	}
	for len(h) > 0 {
		var top uint64
		top, h = heapPop(h)
		r, i := uint32(top>>32), int32(uint32(top))
		if dead[i] || int(next[i]) >= n {
			continue
		}
		j := next[i]
		e := next[j]
		if int(e-i) != len(t.tokens[r]) {
			continue
		}
		dead[j] = true
		next[i] = e
		if int(e) < n {
			prev[e] = i
		}
		if pi := prev[i]; pi >= 0 {
			if r2 := t.rank(p[pi:e]); r2 != noRank {
				h = heapPush(h, uint64(r2)<<32|uint64(pi))
			}
		}
		if int(e) < n {
			if r2 := t.rank(p[i:next[e]]); r2 != noRank {
				h = heapPush(h, uint64(r2)<<32|uint64(i))
			}
		}
	}
	for i := int32(0); int(i) < n; i = next[i] {
		out = append(out, t.rank(p[i:next[i]]))
	}
	sc.next, sc.prev, sc.dead, sc.heap = next, prev, dead, h
	return out
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func growBool(s []bool, n int) []bool {
	if cap(s) < n {
		return make([]bool, n)
	}
	return s[:n]
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= v {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = v
	return h
}

func heapPop(h []uint64) (uint64, []uint64) {
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	n := len(h)
	if n == 0 {
		return top, h
	}
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if last <= h[c] {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = last
	return top, h
}
