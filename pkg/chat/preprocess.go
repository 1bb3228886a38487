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
// prompt's segments and where each one's tokens end, its prompt tokens and
// block hashes, and (from Prepare with the default template) where each
// rendered block ends. A Session belongs to one tokenizer and Hasher;
// Preprocess ignores a Session made with another. It is immutable once
// returned, so callers may share it between goroutines.
type Session struct {
	hasher  kvhash.Hasher
	encoder Encoder
	prompt  Prompt
	ends    []int // ends[i] is where prompt[i]'s tokens end in tokens
	tokens  []uint32
	hashes  []kv.BlockHash
	chatML  *chatMLState
}

// Tokens is the previous turn's prompt.
func (s *Session) Tokens() []uint32 { return s.tokens }

// madeWith reports whether s was made with enc and h (a Session of another
// tokenizer or hasher is not reused).
func (s *Session) madeWith(enc Encoder, h kvhash.Hasher) bool {
	return s.hasher == h && s.encoder == enc
}

// segment is the tokens of prompt[i].
func (s *Session) segment(i int) []uint32 {
	from := 0
	if i > 0 {
		from = s.ends[i-1]
	}
	return s.tokens[from:s.ends[i]]
}

// Preprocess tokenizes a rendered prompt and hashes its blocks. With prev (the
// state the session's previous turn returned, or nil) the leading segments
// equal to the previous prompt's are not tokenized again, and the block
// hashes of the longest common token prefix are reused; the result is
// identical to a cold run (prev == nil) by construction: segments are
// tokenized on their own in both cases, and sequence hashes depend only on
// the tokens before them.
func Preprocess(enc Encoder, h kvhash.Hasher, p Prompt, prev *Session) (Tokenized, *Session) {
	return preprocess(enc, h, p, 0, prev)
}

// smallSegment is the longest segment tokenized once per prompt however
// often it occurs (the separators between blocks); longer ones are content,
// rarely repeated.
const smallSegment = 32

// preprocess is Preprocess knowing that p's first kept segments are prev's
// (rendered from them, so not compared again).
func preprocess(enc Encoder, h kvhash.Hasher, p Prompt, kept int, prev *Session) (Tokenized, *Session) {
	if prev != nil && !prev.madeWith(enc, h) {
		prev, kept = nil, 0
	}
	// Two passes: find every segment's ids, then copy them once into a
	// slice of the exact size (growing a 100k-token slice by appends costs
	// more than everything else on the warm path).
	parts := make([][]uint32, len(p))
	total := 0
	// matched is how many leading segments are prev's: an agent's next
	// prompt repeats the previous one and appends, so comparing in place is
	// enough (a rewritten history costs a cold tokenization, not an error).
	matched := 0
	var small map[Segment][]uint32
	for i, seg := range p {
		var ids []uint32
		switch {
		case prev != nil && i == matched && i < len(prev.prompt) && (i < kept || prev.prompt[i] == seg):
			ids = prev.segment(i)
			matched++
		case len(seg.Text) <= smallSegment:
			var ok bool
			if ids, ok = small[seg]; !ok {
				ids = encodeSegment(enc, seg)
				if small == nil {
					small = make(map[Segment][]uint32)
				}
				small[seg] = ids
			}
		default:
			ids = encodeSegment(enc, seg)
		}
		parts[i] = ids
		total += len(ids)
	}
	tokens := make([]uint32, 0, total)
	ends := make([]int, len(p))
	for i, ids := range parts {
		tokens = append(tokens, ids...)
		ends[i] = len(tokens)
	}
	var reused int
	var hashes []kv.BlockHash
	if prev != nil {
		// The matched segments' tokens are prev's by construction; the
		// common prefix may run on into the next segment.
		if matched > 0 {
			reused = ends[matched-1]
		}
		reused += commonPrefix(prev.tokens[reused:], tokens[reused:])
		full := reused / h.BlockSize
		hashes = make([]kv.BlockHash, full, len(tokens)/h.BlockSize+1)
		copy(hashes, prev.hashes[:full])
	}
	hashes = h.Extend(hashes, tokens)
	next := &Session{hasher: h, encoder: enc, prompt: p, ends: ends, tokens: tokens, hashes: hashes}
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
