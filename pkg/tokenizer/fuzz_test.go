package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzEncode: any input (valid UTF-8 or not) encodes without panicking,
// decodes back to its NFC form (normalized between the added tokens, see
// decoded), streams back to the same text, and EncodeOrdinary agrees with
// Encode when no added token can be involved.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "hello world", "it's", "a\n  \n  b", "<|im_start|>user\nhi<|im_end|>",
		"日本語 🎉", "e\u0301", "\xff\xfe", "'ſ", "１２３", strings.Repeat("ab", 200), "\u3000\u00a0x",
		"<|im_end|>\u0338"} {
		f.Add(s)
	}
	tok := Default()
	bpe := tok.(*bpeTokenizer)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		want := decoded(&bpe.rawAll, s)
		if got := tok.Decode(ids); got != want {
			t.Fatalf("Decode(Encode(%+q)) = %+q, want %+q", s, got, want)
		}
		ord := tok.EncodeOrdinary(s)
		if got, want := tok.Decode(ord), decoded(&bpe.rawOrdinary, s); got != want {
			t.Fatalf("Decode(EncodeOrdinary(%+q)) = %+q, want %+q", s, got, want)
		}
		if !strings.Contains(s, "<") && !slices.Equal(ids, ord) {
			t.Fatalf("Encode %v != EncodeOrdinary %v for %q", ids, ord, s)
		}
		d := NewStreamDecoder(tok)
		var b strings.Builder
		for _, id := range ids {
			chunk := d.Next(id)
			if utf8.ValidString(want) && !utf8.ValidString(chunk) {
				t.Fatalf("chunk %q of valid %q is not valid UTF-8", chunk, s)
			}
			b.WriteString(chunk)
		}
		b.WriteString(d.Flush())
		if b.String() != want {
			t.Fatalf("streamed %q, want %q", b.String(), want)
		}
	})
}

// decoded is what decoding the ids of s gives: the added tokens raw matches
// (in the raw text) as they are, the text between them NFC-normalized on its
// own, as Hugging Face normalizes it. A combining mark right after
// "<|im_end|>" stays one: NFC of the whole text would compose it with ">".
func decoded(raw *matcher, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		pos, end, _, ok := raw.find(s, i)
		if !ok {
			pos, end = len(s), len(s)
		}
		b.WriteString(norm.NFC.String(s[i:pos]))
		b.WriteString(s[pos:end])
		i = end
	}
	return b.String()
}

// TestMergeLargeMatchesSmall: the heap merge used for long pieces gives the
// same ids as the array merge, on pieces built to need many merges.
func TestMergeLargeMatchesSmall(t *testing.T) {
	tok := Default().(*bpeTokenizer)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "ab", "the", " ", "  ", "=", "-", "é", "中", "ing", "x", "0", "\t", "🎉"}
	sc := new(scratch)
	n := 3000
	if raceEnabled {
		n = 500
	}
	for i := range n {
		var b strings.Builder
		n := 1 + rng.IntN(120)
		if i%10 == 0 {
			n = 300 + rng.IntN(600)
		}
		for b.Len() < n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		p := b.String()
		small := tok.mergeSmall(nil, p, sc)
		large := tok.mergeLarge(nil, p, sc)
		if !slices.Equal(small, large) {
			t.Fatalf("%q: small %v large %v", p, small, large)
		}
		if tok.Decode(large) != p {
			t.Fatalf("%q: large merge lost bytes", p)
		}
	}
}
