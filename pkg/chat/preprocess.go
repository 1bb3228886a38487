package chat

import (
	"slices"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"

	"switchyard.dev/pkg/extent"
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
	// prompt, then tail, is the prompt, and ends, then tailEnds, where each
	// of its segments' tokens end in tokens. From Prepare with the default
	// template prompt is its rendered blocks, a view of an array the
	// session's next turn appends its blocks to (chatMLState), and tail its
	// own copy of what followed them (the generation prompt), which that
	// turn overwrites in the array; likewise the ends. Otherwise prompt and
	// ends are all of it.
	prompt, tail   Prompt
	ends, tailEnds []int
	// ends, tokens and hashes may have room past their length that a later
	// turn appends into (extent); what is handed out is capped at the
	// length.
	tokens    []uint32
	hashes    []kv.BlockHash
	endsExt   *extent.Extent
	tokensExt *extent.Extent
	hashesExt *extent.Extent
	chatML    *chatMLState
}

// Tokens is the previous turn's prompt.
func (s *Session) Tokens() []uint32 { return s.tokens[:len(s.tokens):len(s.tokens)] }

// madeWith reports whether s was made with enc and h (a Session of another
// tokenizer or hasher is not reused).
func (s *Session) madeWith(enc Encoder, h kvhash.Hasher) bool {
	return s.hasher == h && s.encoder == enc
}

// seg is the prompt's i'th segment, of segs.
func (s *Session) seg(i int) Segment {
	if i < len(s.prompt) {
		return s.prompt[i]
	}
	return s.tail[i-len(s.prompt)]
}

func (s *Session) segs() int { return len(s.prompt) + len(s.tail) }

// end is where segment i's tokens end.
func (s *Session) end(i int) int {
	if i < len(s.ends) {
		return s.ends[i]
	}
	return s.tailEnds[i-len(s.ends)]
}

// splitTail makes the prompt's first blocks segments the part a later turn
// may append after, in place, and the rest the Session's own: it copies the
// tail out of the shared arrays, then gives back the ends' room past the
// blocks, which this turn had claimed.
func (s *Session) splitTail(blocks int) {
	s.prompt, s.tail = s.prompt[:blocks], slices.Clone(s.prompt[blocks:])
	s.ends, s.tailEnds = s.ends[:blocks], slices.Clone(s.ends[blocks:])
	s.endsExt.Set(blocks)
}

// segment is the tokens of segment i.
func (s *Session) segment(i int) []uint32 {
	from := 0
	if i > 0 {
		from = s.end(i - 1)
	}
	return s.tokens[from:s.end(i)]
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
	if prev == nil || !prev.madeWith(enc, h) {
		prev, kept = nil, 0
	}
	// Two passes: find the ids of every segment past the kept ones, then
	// copy those prev's array does not hold already into one slice of known
	// size (growing a 100k-token slice by appends costs more than
	// everything else on the warm path). The kept segments are not looked
	// at: their ids and ends are prev's, and a thousand-message history has
	// thousands of them.
	parts := make([][]uint32, len(p)-kept)
	// matched is how many leading segments are prev's: an agent's next
	// prompt repeats the previous one and appends, so comparing in place is
	// enough (a rewritten history costs a cold tokenization, not an error).
	matched := kept
	var small map[Segment][]uint32
	for i := kept; i < len(p); i++ {
		seg := p[i]
		var ids []uint32
		switch {
		case prev != nil && i == matched && i < prev.segs() && prev.seg(i) == seg:
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
		parts[i-kept] = ids
	}
	var (
		ends    []int
		endsExt *extent.Extent
		total   int // tokens up to the segment at hand
	)
	if prev != nil {
		ends, endsExt = extent.Extend(prev.ends[:kept], prev.endsExt, len(parts))
		if kept > 0 {
			total = ends[kept-1]
		}
	} else {
		ends, endsExt = extent.Extend[int](nil, nil, len(parts))
	}
	keptTokens := total
	for _, ids := range parts {
		total += len(ids)
		ends = append(ends, total)
	}
	// held is how many leading tokens of p are prev's, in prev's array: the
	// matched segments' (prev's by construction) and, when p repeats it,
	// the rest of prev's prompt (an agent's next prompt begins its answer
	// with the generation prompt that ended the previous one). They stay
	// where they are when that array can take the rest (extend).
	var (
		tokens    []uint32
		tokensExt *extent.Extent
		held      int
	)
	if prev != nil {
		if matched > 0 {
			held = ends[matched-1]
		}
		if repeats(parts[matched-kept:], prev.tokens[held:]) {
			held = len(prev.tokens)
		}
		tokens, tokensExt = extent.Extend(prev.tokens[:held], prev.tokensExt, total-held)
	} else {
		tokens, tokensExt = extent.Extend[uint32](nil, nil, total)
	}
	at := keptTokens // where parts[i] starts in p's tokens
	for _, ids := range parts {
		if skip := held - at; skip < len(ids) {
			tokens = append(tokens, ids[max(0, skip):]...)
		}
		at += len(ids)
	}
	var (
		reused    int
		hashes    []kv.BlockHash
		hashesExt *extent.Extent
	)
	blocks := len(tokens) / h.BlockSize
	if prev != nil {
		// The common prefix may run on into the next segment.
		if matched > 0 {
			reused = ends[matched-1]
		}
		reused += commonPrefix(prev.tokens[reused:], tokens[reused:])
		full := reused / h.BlockSize
		hashes, hashesExt = extent.Extend(prev.hashes[:full], prev.hashesExt, blocks-full)
	} else {
		hashes, hashesExt = extent.Extend[kv.BlockHash](nil, nil, blocks)
	}
	hashes = h.Extend(hashes, tokens)
	next := &Session{hasher: h, encoder: enc, prompt: p, ends: ends, tokens: tokens, hashes: hashes,
		endsExt: endsExt, tokensExt: tokensExt, hashesExt: hashesExt}
	return Tokenized{Tokens: tokens[:len(tokens):len(tokens)], Hashes: hashes[:len(hashes):len(hashes)], ReusedTokens: reused}, next
}

// A Session's arrays are shared with the Sessions before and after it
// (package extent): the next turn appends its new tokens and hashes after
// the previous turn's in the same array instead of copying 100k tokens (at
// 100k tokens the copy, and the clearing of its new array, were a sixth of
// the frontend's CPU per turn).
//
// The arrays of a ChatML prompt's segments and block ends (chatMLState) are
// claimed before their count is known (extent.Claim), and given back with
// it once the turn is done with them; there, and for a Session's token
// ends, the count is the prompt's blocks: the generation prompt after them
// is the turn's own, copied out, and the next turn writes over it.

func encodeSegment(enc Encoder, seg Segment) []uint32 {
	if seg.Special {
		if id, ok := enc.SpecialID(seg.Text); ok {
			return []uint32{id}
		}
	}
	return enc.EncodeOrdinary(seg.Text)
}

// repeats reports whether the ids of parts, one after the other, begin with
// tail.
func repeats(parts [][]uint32, tail []uint32) bool {
	for _, ids := range parts {
		if len(tail) == 0 {
			return true
		}
		n := min(len(ids), len(tail))
		if !slices.Equal(ids[:n], tail[:n]) {
			return false
		}
		tail = tail[n:]
	}
	return len(tail) == 0
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
