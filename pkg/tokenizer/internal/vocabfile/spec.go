// Package vocabfile reads byte-level BPE tokenizer definitions — Hugging Face
// tokenizer.json files and Switchyard's own compact digest of them — into one
// Spec that the tokenizer package builds its encoder from.
//
// It refuses every file whose behaviour the tokenizer package cannot reproduce
// exactly (other pre-tokenizers, normalizers, model types, merge orders), so a
// Spec is a promise that rank-BPE over it gives the ids Hugging Face gives.
package vocabfile

// Pattern names a pre-tokenizer split pattern the tokenizer package has a
// hand-written scanner for.
type Pattern uint8

const (
	// PatternQwen2 is the split regex of Qwen2, Qwen2.5 and Qwen3: numbers are
	// split into single digits.
	PatternQwen2 Pattern = 1
	// PatternLlama3 is the same regex with numbers in groups of up to three
	// (Llama 3, 3.1, 3.2, 3.3).
	PatternLlama3 Pattern = 2
)

// The regexes exactly as they appear in tokenizer.json files; anything else is refused.
const (
	regexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func (p Pattern) String() string {
	switch p {
	case PatternQwen2:
		return "qwen2"
	case PatternLlama3:
		return "llama3"
	}
	return "unknown"
}

// Normalizer names the text normalization applied before pre-tokenization.
type Normalizer uint8

const (
	NormalizerNone Normalizer = 0
	NormalizerNFC  Normalizer = 1
)

// AddedToken is a token matched verbatim in the input before any splitting.
type AddedToken struct {
	ID      uint32
	Content string
	// Special tokens are matched by Encode only; non-special ones by
	// EncodeOrdinary too (Hugging Face's split_special_tokens semantics).
	Special bool
	// Normalized tokens are matched in the normalized text, the others in the raw text.
	Normalized bool
}

// Spec is everything needed to encode and decode with one byte-level BPE
// tokenizer whose merge priority equals its token id.
type Spec struct {
	Name       string
	Pattern    Pattern
	Normalizer Normalizer
	// Vocab holds the raw bytes of model token id i at index i (GPT-2's
	// byte-to-unicode mapping already undone); nil marks an id the model does
	// not define.
	Vocab [][]byte
	Added []AddedToken
	// NeedSelfEncoding asks the tokenizer package to check, before use, that
	// every model token BPE-encodes to itself (set by ParseHF; digests are
	// only written for files that passed).
	NeedSelfEncoding bool
}
