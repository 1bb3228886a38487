package tokenizer

import "strings"

// EncodeIncremental returns Encode(text), reusing prevIDs = Encode(prevText)
// when text starts with prevText — the shape of an agent session, where each
// turn's prompt extends the previous one. Only the text after the last added
// token (<|im_end|>, <|im_start|>, …) that appending cannot affect is encoded
// again, so a 4 KB turn on a 100k-token history costs about as much as
// encoding 4 KB.
//
// Why this is exact: BPE pieces never cross an added token, normalization is
// applied between added tokens, and whether an added token matches at a
// position depends only on the next maxLen bytes (the longest added token).
// So every id up to an added token that starts at least maxLen bytes before
// the end of prevText is final. Cutting anywhere else is not exact: appended
// letters or spaces can extend the last pre-token.
//
// prevIDs must be Encode(prevText) of the same tokenizer. That is checked
// only at the cut (the added token there must be the one prevText has), not
// id by id, which would cost what reuse saves: the ids of another text with
// its added tokens in the same places are reused as they are. When the cut
// does not match, or text does not extend prevText, the result is
// Encode(text) computed in full.
func EncodeIncremental(t Tokenizer, prevText string, prevIDs []uint32, text string) []uint32 {
	b, ok := t.(*bpeTokenizer)
	if !ok || !strings.HasPrefix(text, prevText) || len(b.normAll.bytes) > 0 {
		return t.Encode(text)
	}
	cutByte, cutToken := b.reusablePrefix(prevText, prevIDs)
	if cutToken == 0 {
		return t.Encode(text)
	}
	tail := b.Encode(text[cutByte:])
	out := make([]uint32, 0, cutToken+len(tail))
	return append(append(out, prevIDs[:cutToken]...), tail...)
}

// reusablePrefix finds the end of the last added token in prev that starts
// at least maxLen bytes before its end, and the number of ids up to and
// including it in prevIDs (0, 0 if there is none or prevIDs does not match).
func (t *bpeTokenizer) reusablePrefix(prev string, prevIDs []uint32) (cutByte, cutToken int) {
	limit := len(prev) - t.maxAddedLen
	matches, end := 0, 0
	for i := 0; i < len(prev); {
		pos, e, _, ok := t.rawAll.find(prev, i)
		if !ok || pos > limit {
			break
		}
		matches, end = matches+1, e
		i = e
	}
	if matches == 0 {
		return 0, 0
	}
	// The m-th added-token id in prevIDs is the m-th match: model tokens never
	// have added-token ids.
	seen := 0
	for k, id := range prevIDs {
		if int(id) < len(t.isAdded) && t.isAdded[id] {
			if seen++; seen == matches {
				if t.tokens[id] != prev[end-len(t.tokens[id]):end] {
					return 0, 0 // prevIDs is not Encode(prev)
				}
				return end, k + 1
			}
		}
	}
	return 0, 0
}
