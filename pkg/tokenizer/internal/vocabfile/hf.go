package vocabfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// hfFile is the part of a Hugging Face tokenizer.json this package reads.
// Fields it does not know are ignored only when they cannot change ids.
type hfFile struct {
	AddedTokens []struct {
		ID         uint32 `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        struct {
		Type                    string            `json:"type"`
		Dropout                 *float64          `json:"dropout"`
		ContinuingSubwordPrefix string            `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string            `json:"end_of_word_suffix"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Vocab                   map[string]uint32 `json:"vocab"`
		Merges                  json.RawMessage   `json:"merges"`
	} `json:"model"`
}

type component struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	// Split
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// ByteLevel
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
}

// ErrUnsupported wraps every refusal of a tokenizer.json whose ids this
// package cannot reproduce exactly.
var ErrUnsupported = errors.New("tokenizer: unsupported tokenizer.json")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// ParseHF reads a Hugging Face tokenizer.json of a byte-level BPE model
// (Qwen2/2.5/3, Llama 3) and checks that rank-BPE with rank = token id
// reproduces it: merges must create tokens in increasing id order and every
// multi-byte token must come from a merge.
func ParseHF(r io.Reader) (*Spec, error) {
	var f hfFile
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer.json: %w", err)
	}
	s := &Spec{}
	var err error
	if s.Normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if s.Pattern, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	m := &f.Model
	switch {
	case m.Type != "BPE" && m.Type != "":
		return nil, unsupported("model type %q (only byte-level BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, unsupported("BPE dropout")
	case m.ByteFallback:
		return nil, unsupported("byte_fallback BPE (SentencePiece-style vocabularies need merge-rank BPE)")
	case m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "":
		return nil, unsupported("continuing_subword_prefix/end_of_word_suffix")
	case len(m.Vocab) == 0:
		return nil, unsupported("empty vocabulary")
	}

	maxID := uint32(0)
	for _, id := range m.Vocab {
		maxID = max(maxID, id)
	}
	if int(maxID) >= 4*len(m.Vocab)+1024 {
		return nil, unsupported("vocabulary ids are too sparse (max id %d for %d tokens)", maxID, len(m.Vocab))
	}
	s.Vocab = make([][]byte, maxID+1)
	seen := make(map[string]uint32, len(m.Vocab))
	for tok, id := range m.Vocab {
		b, ok := decodeByteLevel(tok)
		if !ok || len(b) == 0 {
			return nil, unsupported("token %d %q is not in the byte-level alphabet", id, tok)
		}
		if s.Vocab[id] != nil {
			return nil, unsupported("id %d used twice", id)
		}
		if other, dup := seen[string(b)]; dup {
			return nil, unsupported("tokens %d and %d have the same bytes", other, id)
		}
		seen[string(b)] = id
		s.Vocab[id] = b
	}
	for b := 0; b < 256; b++ {
		if _, ok := seen[string([]byte{byte(b)})]; !ok {
			return nil, unsupported("byte 0x%02x has no token", b)
		}
	}
	complete, err := checkMerges(m.Merges, m.Vocab, s.Vocab)
	if err != nil {
		return nil, err
	}
	// Looking whole pre-tokens up before merging is Hugging Face's
	// ignore_merges; without it, it is only sound if every token BPE-encodes to
	// itself, and with a single merge per token that is also the evidence
	// that rank BPE follows the listed merges.
	s.NeedSelfEncoding = !m.IgnoreMerges || !complete

	addedIDs, addedTexts := map[uint32]bool{}, map[string]bool{}
	for _, a := range f.AddedTokens {
		if addedIDs[a.ID] || addedTexts[a.Content] {
			return nil, unsupported("added token %d %q listed twice", a.ID, a.Content)
		}
		addedIDs[a.ID], addedTexts[a.Content] = true, true
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, unsupported("added token %q uses single_word/lstrip/rstrip", a.Content)
		}
		if a.Content == "" {
			return nil, unsupported("empty added token %d", a.ID)
		}
		if a.Normalized && s.Normalizer == NormalizerNFC && !norm.NFC.IsNormalString(a.Content) {
			// Hugging Face matches a normalized added token by its content
			// normalized; the tokenizer package matches the content as it
			// is, which never occurs in NFC text.
			return nil, unsupported("normalized added token %q is not in NFC", a.Content)
		}
		if int(a.ID) > len(s.Vocab)+1<<16 {
			return nil, unsupported("added token %q has id %d, far beyond the vocabulary", a.Content, a.ID)
		}
		if int(a.ID) < len(s.Vocab) && s.Vocab[a.ID] != nil && !bytes.Equal(s.Vocab[a.ID], []byte(a.Content)) {
			// An added token that overrides a different model token would
			// decode differently from how it encodes.
			return nil, unsupported("added token %q reuses model id %d", a.Content, a.ID)
		}
		s.Added = append(s.Added, AddedToken{ID: a.ID, Content: a.Content, Special: a.Special, Normalized: a.Normalized})
	}
	return s, nil
}

func parseNormalizer(raw json.RawMessage) (Normalizer, error) {
	if isNull(raw) {
		return NormalizerNone, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return 0, fmt.Errorf("tokenizer: parse normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return NormalizerNFC, nil
	case "Sequence":
		switch len(c.Normalizers) {
		case 0:
			return NormalizerNone, nil
		case 1:
			return parseNormalizer(c.Normalizers[0])
		}
	}
	return 0, unsupported("normalizer %s", compact(raw))
}

func parsePreTokenizer(raw json.RawMessage) (Pattern, error) {
	var c component
	if isNull(raw) || json.Unmarshal(raw, &c) != nil || c.Type != "Sequence" || len(c.Pretokenizers) != 2 {
		return 0, unsupported("pre_tokenizer %s (want Sequence[Split, ByteLevel])", compact(raw))
	}
	var split, bl component
	if json.Unmarshal(c.Pretokenizers[0], &split) != nil || json.Unmarshal(c.Pretokenizers[1], &bl) != nil {
		return 0, unsupported("pre_tokenizer %s", compact(raw))
	}
	if split.Type != "Split" || split.Behavior != "Isolated" || split.Invert || split.Pattern.Regex == nil {
		return 0, unsupported("pre_tokenizer split %s (want an Isolated regex split)", compact(c.Pretokenizers[0]))
	}
	if bl.Type != "ByteLevel" || bl.AddPrefixSpace || (bl.UseRegex != nil && *bl.UseRegex) {
		return 0, unsupported("pre_tokenizer %s (want ByteLevel without prefix space or regex)", compact(c.Pretokenizers[1]))
	}
	switch *split.Pattern.Regex {
	case regexQwen2:
		return PatternQwen2, nil
	case regexLlama3:
		return PatternLlama3, nil
	}
	return 0, unsupported("split regex %q has no scanner (known: Qwen2/2.5/3, Llama 3)", *split.Pattern.Regex)
}

func checkDecoder(raw json.RawMessage) error {
	var c component
	if isNull(raw) || json.Unmarshal(raw, &c) != nil || c.Type != "ByteLevel" {
		return unsupported("decoder %s (want ByteLevel)", compact(raw))
	}
	return nil
}

// checkMerges verifies the properties that make rank = id BPE exact. The
// merges must create tokens in non-decreasing id order (so merge priority is
// id order) and every multi-byte token must come from a merge. Files that
// list one merge per token (Qwen) are further checked by the tokenizer
// package (every token must BPE-encode to itself). Files that list several
// merges for a token (Llama 3, converted from tiktoken ranks) must list
// every split of every token into two tokens: then the mergeable pairs are
// exactly the adjacent pairs whose concatenation is a token, which is what
// rank BPE merges. It reports whether the file is of that second kind.
func checkMerges(raw json.RawMessage, vocab map[string]uint32, byID [][]byte) (complete bool, err error) {
	pairs, err := parseMerges(raw)
	if err != nil {
		return false, err
	}
	made := make([]bool, len(byID))
	last, dups := -1, false
	for i, p := range pairs {
		_, okA := vocab[p[0]]
		_, okB := vocab[p[1]]
		r, okR := vocab[p[0]+p[1]]
		if !okA || !okB || !okR {
			return false, unsupported("merge %d (%q %q) refers to a token not in the vocabulary", i, p[0], p[1])
		}
		if int(r) < last || (made[r] && int(r) != last) {
			return false, unsupported("merge %d creates token %d after token %d: merges are not in id order, rank = id BPE would differ", i, r, last)
		}
		dups = dups || made[r]
		made[r] = true
		last = int(r)
	}
	for id, b := range byID {
		if len(b) > 1 && !made[id] {
			return false, unsupported("token %d %q is not created by any merge", id, EncodeByteLevel(b))
		}
	}
	if !dups {
		return false, nil
	}
	listed := make(map[[2]string]bool, len(pairs))
	for _, p := range pairs {
		listed[p] = true
	}
	for tok := range vocab {
		for k := 1; k < len(tok); k++ {
			if !utf8.RuneStart(tok[k]) {
				continue
			}
			a, b := tok[:k], tok[k:]
			if _, ok := vocab[a]; !ok {
				continue
			}
			if _, ok := vocab[b]; ok && !listed[[2]string{a, b}] {
				return false, unsupported("merges list several pairs for some tokens but not the split %q + %q of %q: rank = id BPE would differ", a, b, tok)
			}
		}
	}
	return true, nil
}

// parseMerges accepts both spellings: ["a b", ...] (older files, Llama 3)
// and [["a", "b"], ...] (newer files, Qwen3).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var asPairs [][2]string
	if err := json.Unmarshal(raw, &asPairs); err == nil {
		return asPairs, nil
	}
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err != nil {
		return nil, unsupported("merges are neither pairs nor strings: %v", err)
	}
	out := make([][2]string, len(asStrings))
	for i, s := range asStrings {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, unsupported("merge %d %q is not two tokens", i, s)
		}
		out[i] = [2]string{a, b}
	}
	return out, nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
