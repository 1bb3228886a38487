package replay

import (
	"github.com/zeebo/xxh3"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/trace"
)

// hashes returns the engine block hashes of a turn's prompt (its first
// input tokens), how many lead the session's previous prompt shares, and
// how many of its tokens an infinite cache would hold: the leading blocks
// any earlier turn sent, up to the last full block before the prompt's end
// (an engine always computes at least one token).
// Trace ids are expanded into engine blocks: the engine block ending at
// token e is named by the trace id that covers token e, e's offset in it
// and the draw's namespace, so equal id prefixes of one draw give equal
// hash prefixes and two draws share nothing; tokens past the trace ids are
// unique to the turn (salt).
func (s *sim) hashes(ss *sessState, t *trace.Turn, input, salt int) (out []kv.BlockHash, reuse, ideal int) {
	tb, eb := s.w.BlockSize, s.engineBlock
	n := input / eb
	ids := t.Blocks
	lcp := 0
	for lcp < len(ids) && lcp < len(ss.prevIDs) && ids[lcp] == ss.prevIDs[lcp] {
		lcp++
	}
	// Engine blocks fully inside the common trace prefix are reusable.
	reuse = min(lcp*tb/eb, len(ss.prevHash), n)
	out = make([]kv.BlockHash, n)
	copy(out, ss.prevHash[:reuse])
	var parent kv.BlockHash
	if reuse > 0 {
		parent = out[reuse-1]
	}
	tail := uint64(salt)*0x9e3779b97f4a7c15 ^ 0xabcdef
	for k := reuse; k < n; k++ {
		end := (k+1)*eb - 1
		var local uint64
		if b := end / tb; b < len(ids) {
			local = mix(ids[b], uint64(end%tb)|ss.ns)
		} else {
			local = mix(tail, uint64(k)) // unhashed tail: this turn's own
		}
		if k == 0 {
			parent = kvhash.Root(kv.LocalHash(local))
		} else {
			parent = kvhash.Chain(parent, kv.LocalHash(local))
		}
		out[k] = parent
	}
	// The infinite cache holds the session's previous prompt and whatever
	// else was sent before.
	hit := reuse
	for hit < n {
		if _, ok := s.seen[out[hit]]; !ok {
			break
		}
		hit++
	}
	for _, h := range out[reuse:] {
		s.seen[h] = struct{}{}
	}
	ss.prevIDs, ss.prevHash = ids, out
	return out, reuse, min(hit, (input-1)/eb) * eb
}

// routedIdeal is how many of a turn's prompt tokens worker w would hold were
// its cache infinite: the leading blocks sent to it before. What it lacks of
// the fleet-wide ideal was lost to routing; what the engine lacks of it, to
// eviction.
func (s *sim) routedIdeal(ss *sessState, w *worker, wi int, hashes []kv.BlockHash, reuse, input int) int {
	start := 0
	if ss.last == wi {
		start = reuse // the session's previous prompt went here
	}
	ss.last = wi
	hit := start
	for hit < len(hashes) {
		if _, ok := w.seen[hashes[hit]]; !ok {
			break
		}
		hit++
	}
	for _, h := range hashes[start:] {
		w.seen[h] = struct{}{}
	}
	return min(hit, (input-1)/s.engineBlock) * s.engineBlock
}

func mix(a, b uint64) uint64 {
	var buf [16]byte
	for i := range 8 {
		buf[i] = byte(a >> (8 * i))
		buf[8+i] = byte(b >> (8 * i))
	}
	return xxh3.Hash(buf[:])
}
