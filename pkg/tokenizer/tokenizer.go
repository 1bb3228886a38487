package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"

	"switchyard.dev/pkg/tokenizer/internal/vocabfile"
)

// Tokenizer turns text into the token ids an engine computes for it, and back.
// Implementations are safe for concurrent use.
type Tokenizer interface {
	// Name identifies the vocabulary (e.g. "qwen3"); equal names mean equal ids.
	Name() string
	// Encode matches added tokens (special ones such as <|im_start|> and
	// non-special ones such as <think>) exactly, leftmost-longest, then
	// normalizes, pre-tokenizes and BPE-encodes the text between them. It
	// equals Hugging Face's encode(text, add_special_tokens=False).
	Encode(text string) []uint32
	// EncodeOrdinary is Encode without matching special tokens: a
	// "<|im_start|>" in the text becomes ordinary text tokens. Non-special
	// added tokens are still matched (Hugging Face's split_special_tokens).
	// Use it for untrusted content that must not inject control tokens.
	EncodeOrdinary(text string) []uint32
	// Decode concatenates the bytes of the tokens; added tokens decode to their
	// text. Unknown ids are skipped. The result may end inside a multi-byte
	// character (see StreamDecoder).
	Decode(ids []uint32) string
	// VocabSize is one more than the largest id, added tokens included.
	VocabSize() int
	// SpecialID returns the id of an added token by its text (special or not,
	// e.g. "<|im_start|>", "<tool_call>").
	SpecialID(s string) (uint32, bool)
}

// bpeTokenizer is a byte-level BPE tokenizer with rank = token id.
type bpeTokenizer struct {
	name  string
	scan  scanner
	nfc   bool
	ranks vocabTable // model token bytes → id
	// tokens[id] is the text of id (model tokens and added tokens); "" = unknown id.
	tokens []string
	added  map[string]uint32

	// Added-token matchers: the raw text is split on tokens that are matched
	// before normalization, each remaining segment is normalized and split on
	// the normalized ones.
	rawAll, normAll        matcher // Encode
	rawOrdinary, normOrdin matcher // EncodeOrdinary
	isAdded                []bool  // by id
	maxAddedLen            int
	pool                   sync.Pool
}

var _ Tokenizer = (*bpeTokenizer)(nil)

// ErrUnsupported is wrapped by Load's errors for files that parse but whose
// ids this package cannot reproduce exactly.
var ErrUnsupported = vocabfile.ErrUnsupported

// Load reads a Hugging Face tokenizer.json of a byte-level BPE model (Qwen2,
// Qwen2.5, Qwen3, Llama 3). It refuses every file whose ids it could not
// reproduce exactly — other normalizers, pre-tokenizers or split regexes,
// SentencePiece-style BPE, merges not in id order — with an error that wraps
// ErrUnsupported and says what is unsupported. Name() is "hf-" plus a hash of
// the file. Encode and EncodeOrdinary equal Hugging Face's encode with
// add_special_tokens=False (no BOS from the post-processor).
func Load(tokenizerJSON io.Reader) (Tokenizer, error) {
	h := sha256.New()
	spec, err := vocabfile.ParseHF(io.TeeReader(tokenizerJSON, h))
	if err != nil {
		return nil, err
	}
	spec.Name = "hf-" + hex.EncodeToString(h.Sum(nil))[:12]
	t, err := newBPE(spec)
	if err != nil {
		return nil, err
	}
	if spec.NeedSelfEncoding {
		if err := t.checkSelfEncoding(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func newBPE(spec *vocabfile.Spec) (*bpeTokenizer, error) {
	t := &bpeTokenizer{name: spec.Name, added: make(map[string]uint32, len(spec.Added))}
	switch spec.Pattern {
	case vocabfile.PatternQwen2:
		t.scan = scanner{maxDigits: 1}
	case vocabfile.PatternLlama3:
		t.scan = scanner{maxDigits: 3}
	default:
		return nil, fmt.Errorf("tokenizer: unknown split pattern %d", spec.Pattern)
	}
	switch spec.Normalizer {
	case vocabfile.NormalizerNone:
	case vocabfile.NormalizerNFC:
		t.nfc = true
	default:
		return nil, fmt.Errorf("tokenizer: unknown normalizer %d", spec.Normalizer)
	}
	size := len(spec.Vocab)
	for _, a := range spec.Added {
		size = max(size, int(a.ID)+1)
	}
	// One string holds every model token and the token table holds views
	// into it: two allocations instead of 150k.
	total := 0
	for _, b := range spec.Vocab {
		total += len(b)
	}
	var sb strings.Builder
	sb.Grow(total)
	for _, b := range spec.Vocab {
		sb.Write(b)
	}
	all := sb.String()
	t.tokens = make([]string, size)
	modelIDs := make([]uint32, 0, len(spec.Vocab))
	off := 0
	for id, b := range spec.Vocab {
		if len(b) == 0 {
			continue
		}
		t.tokens[id] = all[off : off+len(b)]
		off += len(b)
		modelIDs = append(modelIDs, uint32(id))
	}
	t.ranks = newVocabTable(t.tokens, modelIDs)
	var rawAll, normAll, rawOrd, normOrd []vocabfile.AddedToken
	t.isAdded = make([]bool, size)
	for _, a := range spec.Added {
		t.tokens[a.ID] = a.Content
		t.added[a.Content] = a.ID
		t.isAdded[a.ID] = true
		t.maxAddedLen = max(t.maxAddedLen, len(a.Content))
		if a.Normalized {
			normAll = append(normAll, a)
			if !a.Special {
				normOrd = append(normOrd, a)
			}
		} else {
			rawAll = append(rawAll, a)
			if !a.Special {
				rawOrd = append(rawOrd, a)
			}
		}
	}
	t.rawAll, t.normAll = newMatcher(rawAll), newMatcher(normAll)
	t.rawOrdinary, t.normOrdin = newMatcher(rawOrd), newMatcher(normOrd)
	t.pool.New = func() any { return new(scratch) }
	return t, nil
}

// checkSelfEncoding verifies that every model token BPE-encodes to itself.
// Together with the merge-order check in vocabfile this is what justifies
// looking whole pre-tokens up before merging, and catches vocabularies
// where rank = id merging takes a path the merge list does not.
func (t *bpeTokenizer) checkSelfEncoding() error {
	sc := new(scratch)
	var out []uint32
	for id, s := range t.tokens {
		if len(s) < 2 {
			continue
		}
		if want, ok := t.ranks.lookup(s); !ok || want != uint32(id) {
			continue // an added token
		}
		if len(s) >= largePiece {
			out = t.mergeLarge(out[:0], s, sc)
		} else {
			out = t.mergeSmall(out[:0], s, sc)
		}
		if len(out) != 1 || out[0] != uint32(id) {
			return fmt.Errorf("%w: token %d %q does not encode to itself (got %v): rank = id BPE would differ",
				vocabfile.ErrUnsupported, id, vocabfile.EncodeByteLevel([]byte(s)), out)
		}
	}
	return nil
}

func (t *bpeTokenizer) Name() string   { return t.name }
func (t *bpeTokenizer) VocabSize() int { return len(t.tokens) }

func (t *bpeTokenizer) SpecialID(s string) (uint32, bool) {
	id, ok := t.added[s]
	return id, ok
}

func (t *bpeTokenizer) Encode(text string) []uint32 {
	return t.encode(text, &t.rawAll, &t.normAll)
}

func (t *bpeTokenizer) EncodeOrdinary(text string) []uint32 {
	return t.encode(text, &t.rawOrdinary, &t.normOrdin)
}

func (t *bpeTokenizer) encode(text string, raw, normalized *matcher) []uint32 {
	if text == "" {
		return nil
	}
	sc := t.pool.Get().(*scratch)
	defer t.pool.Put(sc)
	// Code and prose average 3–4 bytes per token (CJK about 3): a third of
	// the length rarely reallocates, and growing a 100k-token slice costs
	// more than over-allocating.
	out := make([]uint32, 0, len(text)/3+16)
	for i := 0; i < len(text); {
		pos, end, id, ok := raw.find(text, i)
		if !ok {
			pos = len(text)
		}
		out = t.encodeSegment(out, text[i:pos], normalized, sc)
		if !ok {
			break
		}
		out = append(out, id)
		i = end
	}
	return out
}

// encodeSegment encodes text that contains no raw-matched added token.
func (t *bpeTokenizer) encodeSegment(out []uint32, seg string, normalized *matcher, sc *scratch) []uint32 {
	if seg == "" {
		return out
	}
	if t.nfc {
		seg = norm.NFC.String(seg)
	}
	for i := 0; i < len(seg); {
		pos, end, id, ok := normalized.find(seg, i)
		if !ok {
			pos = len(seg)
		}
		out = t.encodeText(out, seg[i:pos], sc)
		if !ok {
			break
		}
		out = append(out, id)
		i = end
	}
	return out
}

// encodeText pre-tokenizes and BPE-encodes normalized text.
func (t *bpeTokenizer) encodeText(out []uint32, s string, sc *scratch) []uint32 {
	for i := 0; i < len(s); {
		j := t.scan.next(s, i)
		out = t.appendPiece(out, s[i:j], sc)
		i = j
	}
	return out
}

func (t *bpeTokenizer) Decode(ids []uint32) string {
	n := 0
	for _, id := range ids {
		if int(id) < len(t.tokens) {
			n += len(t.tokens[id])
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		if int(id) < len(t.tokens) {
			b.WriteString(t.tokens[id])
		}
	}
	return b.String()
}

// tokenText returns the bytes of one id ("" if unknown).
func (t *bpeTokenizer) tokenText(id uint32) string {
	if int(id) < len(t.tokens) {
		return t.tokens[id]
	}
	return ""
}

// matcher finds added tokens leftmost-longest, like Hugging Face's
// Aho-Corasick matcher. Vocabularies have tens to a few hundred added tokens
// that nearly all start with '<', so a first-byte filter plus prefix tests is
// enough.
type matcher struct {
	first [256][]vocabfile.AddedToken // by first byte, longest first
	bytes []byte                      // the distinct first bytes
}

func newMatcher(tokens []vocabfile.AddedToken) matcher {
	var m matcher
	for _, a := range tokens {
		c := a.Content[0]
		if m.first[c] == nil {
			m.bytes = append(m.bytes, c)
		}
		m.first[c] = append(m.first[c], a)
	}
	for _, c := range m.bytes {
		l := m.first[c]
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].Content) > len(l[j].Content) })
	}
	return m
}

// find returns the leftmost, longest added token in s at or after from.
func (m *matcher) find(s string, from int) (pos, end int, id uint32, ok bool) {
	switch len(m.bytes) {
	case 0:
		return 0, 0, 0, false
	case 1:
		c := m.bytes[0]
		for i := from; i < len(s); {
			k := strings.IndexByte(s[i:], c)
			if k < 0 {
				break
			}
			i += k
			for _, a := range m.first[c] {
				if strings.HasPrefix(s[i:], a.Content) {
					return i, i + len(a.Content), a.ID, true
				}
			}
			i++
		}
		return 0, 0, 0, false
	}
	for i := from; i < len(s); i++ {
		for _, a := range m.first[s[i]] {
			if strings.HasPrefix(s[i:], a.Content) {
				return i, i + len(a.Content), a.ID, true
			}
		}
	}
	return 0, 0, 0, false
}
