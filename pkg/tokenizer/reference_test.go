package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// refCase is one input of the differential test with the ids Hugging Face
// tokenizers 0.23.2 computed for it (testdata/reference.js).
type refCase struct {
	Name     string   `json:"name"`
	Text     string   `json:"text"`
	IDs      []uint32 `json:"ids"`
	Ordinary []uint32 `json:"ordinary"` // nil = same as IDs
}

var loadReference = sync.OnceValues(func() ([]refCase, error) {
	f, err := os.Open("testdata/qwen3_reference.json.gz")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	var ref struct {
		Cases []refCase `json:"cases"`
	}
	if err := json.NewDecoder(zr).Decode(&ref); err != nil {
		return nil, err
	}
	return ref.Cases, nil
})

func reference(tb testing.TB) []refCase {
	tb.Helper()
	cases, err := loadReference()
	if err != nil {
		tb.Fatalf("reference data: %v", err)
	}
	return cases
}

func referenceText(tb testing.TB, name string) string {
	for _, c := range reference(tb) {
		if c.Name == name {
			return c.Text
		}
	}
	tb.Fatalf("no reference case %q", name)
	return ""
}

// diffIDs describes the first difference between two id sequences.
func diffIDs(t Tokenizer, want, got []uint32) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	ctx := func(ids []uint32) string {
		lo, hi := max(0, i-3), min(len(ids), i+4)
		var parts []string
		for _, id := range ids[lo:hi] {
			parts = append(parts, fmt.Sprintf("%d:%q", id, t.Decode([]uint32{id})))
		}
		return fmt.Sprint(parts)
	}
	return fmt.Sprintf("len want %d got %d, first difference at %d\n want %s\n  got %s", len(want), len(got), i, ctx(want), ctx(got))
}

// TestReferenceIDs is the differential test: Default must give exactly the
// ids of Hugging Face tokenizers on the corpus, the fuzz strings and the
// 100k-token prompt, for Encode and for EncodeOrdinary.
func TestReferenceIDs(t *testing.T) {
	tok := Default()
	cases := reference(t)
	if len(cases) < 2000 {
		t.Fatalf("only %d reference cases", len(cases))
	}
	bad := 0
	for _, c := range cases {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			bad++
			if bad <= 10 {
				t.Errorf("%s: Encode(%q):\n%s", c.Name, trunc(c.Text), diffIDs(tok, c.IDs, got))
			}
		}
		wantOrd := c.Ordinary
		if wantOrd == nil {
			wantOrd = c.IDs
		}
		if got := tok.EncodeOrdinary(c.Text); !slices.Equal(got, wantOrd) {
			bad++
			if bad <= 10 {
				t.Errorf("%s: EncodeOrdinary(%q):\n%s", c.Name, trunc(c.Text), diffIDs(tok, wantOrd, got))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d encodings differ from Hugging Face", bad, 2*len(cases))
	}
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// TestRoundTrip: decoding the ids of a text gives the text back, normalized.
func TestRoundTrip(t *testing.T) {
	tok := Default()
	for _, c := range reference(t) {
		want := norm.NFC.String(c.Text)
		if got := tok.Decode(tok.Encode(c.Text)); got != want {
			t.Errorf("%s: Decode(Encode(%q)) = %q", c.Name, trunc(c.Text), trunc(got))
		}
		if got := tok.Decode(tok.EncodeOrdinary(c.Text)); got != want {
			t.Errorf("%s: Decode(EncodeOrdinary(%q)) = %q", c.Name, trunc(c.Text), trunc(got))
		}
	}
}

// TestStreamDecoder: streaming the ids of every reference text gives the
// same text as decoding them at once, and every chunk is valid UTF-8.
func TestStreamDecoder(t *testing.T) {
	tok := Default()
	for _, c := range reference(t) {
		d := NewStreamDecoder(tok)
		var got []byte
		for _, id := range c.IDs {
			chunk := d.Next(id)
			if !utf8.ValidString(chunk) {
				t.Fatalf("%s: chunk %q is not valid UTF-8", c.Name, chunk)
			}
			got = append(got, chunk...)
		}
		got = append(got, d.Flush()...)
		if want := tok.Decode(c.IDs); string(got) != want {
			t.Errorf("%s: streamed %q, want %q", c.Name, trunc(string(got)), trunc(want))
		}
	}
}

// TestStreamDecoderHoldsSplitCharacters checks the hold-back itself on
// characters whose bytes are spread over several tokens.
func TestStreamDecoderHoldsSplitCharacters(t *testing.T) {
	tok := Default()
	for _, s := range []string{" 🎉", "x👨‍👩‍👧‍👦y", "ภาษาไทย", "\U0001D4AA\U0001D4AB", "ok"} {
		ids := tok.Encode(s)
		d := NewStreamDecoder(tok)
		var got string
		for i, id := range ids {
			chunk := d.Next(id)
			// What is emitted so far must be exactly the longest valid prefix.
			got += chunk
			whole := tok.Decode(ids[:i+1])
			wantSoFar := whole[:len(whole)-incompleteTail([]byte(whole))]
			if got != wantSoFar {
				t.Fatalf("%q after %d ids: emitted %q, want %q", s, i+1, got, wantSoFar)
			}
		}
		if got += d.Flush(); got != s {
			t.Errorf("%q: streamed %q", s, got)
		}
	}
	// " 🎉" is three byte-level tokens in Qwen3; the emoji may only come
	// out with the last one.
	ids := tok.Encode(" \U0001F389")
	if len(ids) < 2 {
		t.Fatalf("want the emoji split over several tokens, got %v", ids)
	}
	d := NewStreamDecoder(tok)
	var early string
	for _, id := range ids[:len(ids)-1] {
		early += d.Next(id)
	}
	if last := d.Next(ids[len(ids)-1]); early != " " || last != "\U0001F389" {
		t.Fatalf("chunks %q then %q", early, last)
	}
	// Invalid bytes are passed through, never held forever.
	if got := incompleteTail([]byte("a\xff")); got != 0 {
		t.Errorf("incompleteTail(invalid) = %d", got)
	}
	if got := incompleteTail([]byte("a\xe6\x97")); got != 2 {
		t.Errorf("incompleteTail(2 of 3 bytes) = %d", got)
	}
}

func TestSpecialIDAndVocab(t *testing.T) {
	tok := Default()
	for s, want := range map[string]uint32{"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<think>": 151667, "</think>": 151668, "<tool_call>": 151657} {
		if got, ok := tok.SpecialID(s); !ok || got != want {
			t.Errorf("SpecialID(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	if _, ok := tok.SpecialID("hello"); ok {
		t.Error("SpecialID(hello) found")
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d", got)
	}
	if tok.Name() != "qwen3" {
		t.Errorf("Name = %q", tok.Name())
	}
	// Special tokens are matched by Encode only; <think> by both.
	if got := tok.Encode("<|im_start|>"); !slices.Equal(got, []uint32{151644}) {
		t.Errorf("Encode(<|im_start|>) = %v", got)
	}
	if got := tok.EncodeOrdinary("<|im_start|>"); len(got) < 2 || slices.Contains(got, 151644) {
		t.Errorf("EncodeOrdinary(<|im_start|>) = %v", got)
	}
	if got := tok.EncodeOrdinary("<think>"); !slices.Equal(got, []uint32{151667}) {
		t.Errorf("EncodeOrdinary(<think>) = %v", got)
	}
	if got := tok.Decode([]uint32{151644, 9707, 1 << 30}); got != "<|im_start|>Hello" {
		t.Errorf("Decode = %q", got)
	}
}

func TestOutputVocab(t *testing.T) {
	tok := Default()
	ids := OutputVocab(tok)
	if len(ids) < 200 {
		t.Fatalf("only %d single-token words", len(ids))
	}
	seen := map[uint32]bool{}
	for _, id := range ids {
		s := tok.Decode([]uint32{id})
		if len(s) < 2 || s[0] != ' ' || seen[id] {
			t.Errorf("id %d = %q", id, s)
		}
		seen[id] = true
		if got := tok.Encode(s); !slices.Equal(got, []uint32{id}) {
			t.Errorf("%q encodes to %v, not %d", s, got, id)
		}
	}
}

// wrapped hides the concrete type, as a caller's decorator would.
type wrapped struct{ Tokenizer }

func TestStreamDecoderOtherTokenizer(t *testing.T) {
	tok := wrapped{Default()}
	text := "naïve 日本語 👨‍👩‍👧 done"
	ids := tok.Encode(text)
	d := NewStreamDecoder(tok)
	var got string
	for _, id := range ids {
		chunk := d.Next(id)
		if !utf8.ValidString(chunk) {
			t.Fatalf("chunk %q is not valid UTF-8", chunk)
		}
		got += chunk
	}
	if got += d.Flush(); got != text {
		t.Errorf("streamed %q", got)
	}
}
