package vocabfile

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sampleSpec() *Spec {
	vocab := make([][]byte, 260)
	for b := range 256 {
		vocab[b] = []byte{byte(b)}
	}
	vocab[256], vocab[257] = []byte("ab"), []byte("abc")
	// 258 is a gap: an id the model does not define.
	vocab[259] = []byte("\xe4\xb8")
	return &Spec{
		Name: "sample", Pattern: PatternLlama3, Normalizer: NormalizerNFC, Vocab: vocab,
		Added: []AddedToken{{ID: 260, Content: "<|end|>", Special: true}, {ID: 261, Content: "<think>", Normalized: true}},
	}
}

func TestDigestRoundTrip(t *testing.T) {
	want := sampleSpec()
	var buf bytes.Buffer
	if err := want.WriteDigest(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDigest(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// Writing is deterministic, so the committed digest is reproducible.
	var again bytes.Buffer
	if err := got.WriteDigest(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("digest bytes differ between two writes")
	}
}

func TestReadDigestRejectsCorruption(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleSpec().WriteDigest(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDigest(strings.NewReader("not gzip")); err == nil {
		t.Error("accepted non-gzip input")
	}
	// A truncated stream must fail, not return a partial vocabulary.
	full := buf.Bytes()
	if _, err := ReadDigest(bytes.NewReader(full[:len(full)/2])); err == nil {
		t.Error("accepted a truncated digest")
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteToRune[b]
		if seen[r] {
			t.Fatalf("rune %U used twice", r)
		}
		seen[r] = true
		got, ok := decodeByteLevel(string(r))
		if !ok || len(got) != 1 || got[0] != byte(b) {
			t.Fatalf("byte %#x ↔ %U does not round-trip", b, r)
		}
	}
	// The spellings tokenizer.json files use: space is Ġ, newline is Ċ.
	if byteToRune[' '] != 'Ġ' || byteToRune['\n'] != 'Ċ' || byteToRune['a'] != 'a' {
		t.Errorf("space %q newline %q", byteToRune[' '], byteToRune['\n'])
	}
	if _, ok := decodeByteLevel("▁x"); ok {
		t.Error("accepted a SentencePiece ▁")
	}
}

// FuzzReadDigest: the digest reader never panics on corrupt input.
func FuzzReadDigest(f *testing.F) {
	var buf bytes.Buffer
	if err := sampleSpec().WriteDigest(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		ReadDigest(bytes.NewReader(b))
	})
}
