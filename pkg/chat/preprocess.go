package chat

import (
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// Encoder is the part of a tokenizer preprocessing needs
// (switchyard.dev/pkg/tokenizer.Tokenizer satisfies it).
type Encoder interface {
	// EncodeOrdinary tokenizes text without matching special tokens.
	EncodeOrdinary(text string) []uint32
	// SpecialID is the id of a special (added) token.
	SpecialID(s string) (uint32, bool)
}

// Tokenized is a prompt ready for routing and generation.
type Tokenized struct {
	Tokens []uint32
	// Hashes are the kvhash sequence hashes of every full block of Tokens.
	Hashes []kv.BlockHash
	// ReusedTokens is how many leading tokens came from the session's
	// previous turn (their block hashes were reused, not recomputed).
	ReusedTokens int
}

// Session is what one session's previous turn leaves for the next: its
// segments' tokens, its prompt tokens and block hashes. A Session belongs to
// one tokenizer and Hasher; Preprocess ignores a Session made with another.
// It is immutable once returned, so callers may share it between goroutines.
type Session struct {
	hasher   kvhash.Hasher
	encoder  Encoder
	segments map[Segment][]uint32
	tokens   []uint32
	hashes   []kv.BlockHash
}

// Tokens is the previous turn's prompt.
func (s *Session) Tokens() []uint32 { return s.tokens }

// Preprocess tokenizes a rendered prompt and hashes its blocks. With prev (the
// state the session's previous turn returned, or nil) every segment equal to
// one of the previous turn's is not tokenized again, and the block hashes of
// the longest common token prefix are reused; the result is identical to a
// cold run (prev == nil) by construction: segments are tokenized on their own
// in both cases, and sequence hashes depend only on the tokens before them.
func Preprocess(enc Encoder, h kvhash.Hasher, p Prompt, prev *Session) (Tokenized, *Session) {
	if prev != nil && (prev.hasher != h || prev.encoder != enc) {
		prev = nil
	}
	next := &Session{hasher: h, encoder: enc, segments: make(map[Segment][]uint32, len(p))}
	// Two passes: find every segment's ids, then copy them once into a
	// slice of the exact size (growing a 100k-token slice by appends costs
	// more than everything else on the warm path).
	parts := make([][]uint32, len(p))
	total := 0
	for i, seg := range p {
		ids, ok := next.segments[seg]
		if !ok && prev != nil {
			ids, ok = prev.segments[seg]
		}
		if !ok {
			ids = encodeSegment(enc, seg)
		}
		next.segments[seg] = ids
		parts[i] = ids
		total += len(ids)
	}
	tokens := make([]uint32, 0, total)
	for _, ids := range parts {
		tokens = append(tokens, ids...)
	}
	var reused int
	var hashes []kv.BlockHash
	if prev != nil {
		reused = commonPrefix(prev.tokens, tokens)
		full := reused / h.BlockSize
		hashes = make([]kv.BlockHash, full, len(tokens)/h.BlockSize+1)
		copy(hashes, prev.hashes[:full])
	}
	hashes = h.Extend(hashes, tokens)
	next.tokens, next.hashes = tokens, hashes
	return Tokenized{Tokens: tokens, Hashes: hashes, ReusedTokens: reused}, next
}

func encodeSegment(enc Encoder, seg Segment) []uint32 {
	if seg.Special {
		if id, ok := enc.SpecialID(seg.Text); ok {
			return []uint32{id}
		}
	}
	return enc.EncodeOrdinary(seg.Text)
}

func commonPrefix(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
