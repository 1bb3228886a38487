package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestEncodeIncremental: reusing the ids of any prefix gives exactly the
// ids of a cold Encode, for cuts anywhere (inside added tokens, words,
// multi-byte characters, whitespace runs), on the reference prompt and on
// texts made of reference strings joined by ChatML turns.
func TestEncodeIncremental(t *testing.T) {
	tok := Default()
	rng := rand.New(rand.NewPCG(3, 4))
	cases := reference(t)
	check := func(name, text string, k int) {
		t.Helper()
		prev := text[:k]
		got := EncodeIncremental(tok, prev, tok.Encode(prev), text)
		if want := tok.Encode(text); !slices.Equal(got, want) {
			t.Fatalf("%s cut at %d (%q | %q): %s", name, k, trunc(prev[max(0, k-40):]), trunc(text[k:]), diffIDs(tok, want, got))
		}
	}
	prompt := referenceText(t, "prompt")
	cuts, headLen := 20, 12_000
	if raceEnabled {
		cuts, headLen = 3, 4_500
	}
	for range cuts {
		check("prompt", prompt, rng.IntN(len(prompt)+1))
	}
	// Cuts right around the added tokens of the first turns.
	head := prompt[:headLen]
	for i := 0; i < len(head); {
		k := strings.Index(head[i:], "<|im_")
		if k < 0 {
			break
		}
		for d := -12; d <= 12; d++ {
			if c := i + k + d; c >= 0 && c <= len(head) {
				check("head", head, c)
			}
		}
		i += k + 1
	}
	for i := 0; i+3 < len(cases); i += 3 {
		text := cases[i].Text + "<|im_end|>\n<|im_start|>user\n" + cases[i+1].Text + "<think>" + cases[i+2].Text
		for range 5 {
			check(cases[i].Name, text, rng.IntN(len(text)+1))
		}
	}
	// Not an extension, or ids that are not the prefix's: full encode.
	if got := EncodeIncremental(tok, "abc<|im_end|>", tok.Encode("abc<|im_end|>"), "xyz"); !slices.Equal(got, tok.Encode("xyz")) {
		t.Errorf("non-extension: %v", got)
	}
	long := strings.Repeat("word ", 10) + "<|im_end|>" + strings.Repeat("x", 30)
	if got := EncodeIncremental(tok, long, []uint32{1, 2, 3}, long+"!"); !slices.Equal(got, tok.Encode(long+"!")) {
		t.Errorf("wrong prevIDs: %v", got)
	}
}

// BenchmarkEncodeIncremental is the warm path of an agent turn: 4 KB of new
// conversation appended to the 100k-token prompt whose ids are known.
func BenchmarkEncodeIncremental(b *testing.B) {
	tok := Default()
	prompt := referenceText(b, "prompt")
	prev := prompt[:len(prompt)-4096]
	for !strings.HasSuffix(prev, "<|im_end|>\n") {
		prev = prev[:len(prev)-1]
	}
	prevIDs := tok.Encode(prev)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		EncodeIncremental(tok, prev, prevIDs, prompt)
	}
	reportCPU(b, cpu)
}

// FuzzEncodeIncremental: for any text and cut, reusing the prefix's ids
// gives the ids of a cold Encode.
func FuzzEncodeIncremental(f *testing.F) {
	f.Add("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi there", 20)
	f.Add("a<|im_end|>bbbbbbbbbbbbbbbbbbbbbbbb  \n\n<think>x", 30)
	f.Add("<|im_end|><|im_end|><|im_end|><|im_end|><|im_end|>", 35)
	tok := Default()
	f.Fuzz(func(t *testing.T, text string, cut int) {
		if cut < 0 || cut > len(text) {
			return
		}
		prev := text[:cut]
		got := EncodeIncremental(tok, prev, tok.Encode(prev), text)
		if want := tok.Encode(text); !slices.Equal(got, want) {
			t.Fatalf("cut %d of %q: %v, want %v", cut, text, got, want)
		}
	})
}
