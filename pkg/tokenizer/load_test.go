package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"switchyard.dev/pkg/tokenizer/internal/vocabfile"
)

const qwenRegex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// hfJSON builds a tokenizer.json document in Hugging Face's layout.
func hfJSON(vocab map[string]uint32, merges [][2]string, added []map[string]any) map[string]any {
	return map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenRegex}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges,
		},
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestLoadRebuiltQwen3 rebuilds a tokenizer.json from the embedded Qwen3
// vocabulary (merges recovered by running BPE on each token) and checks
// that Load of it encodes every reference case exactly like Default: the
// JSON path (byte-level alphabet, merges in both spellings, added tokens)
// gives the same tokenizer as the digest path.
func TestLoadRebuiltQwen3(t *testing.T) {
	if testing.Short() || raceEnabled {
		// Single-goroutine parsing of a 10 MB document: nothing for the race
		// detector to find, and minutes under it on the 2-core machine.
		t.Skip("builds a 10 MB tokenizer.json: not with -short, nor -race (scripts/test.sh runs it again without)")
	}
	def := Default().(*bpeTokenizer)
	vocab := map[string]uint32{}
	var merges [][2]string
	var added []map[string]any
	for id, s := range def.tokens {
		if s == "" {
			continue
		}
		if tid, ok := def.added[s]; ok && tid == uint32(id) {
			special := strings.HasPrefix(s, "<|") && !strings.HasPrefix(s, "<|fim") && s != "<|repo_name|>" && s != "<|file_sep|>"
			added = append(added, map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false,
				"rstrip": false, "normalized": false, "special": special})
			continue
		}
		vocab[vocabfile.EncodeByteLevel([]byte(s))] = uint32(id)
		if len(s) > 1 {
			a, b := lastMerge(def, s)
			merges = append(merges, [2]string{vocabfile.EncodeByteLevel([]byte(a)), vocabfile.EncodeByteLevel([]byte(b))})
		}
	}
	tok, err := Load(bytes.NewReader(mustJSON(t, hfJSON(vocab, merges, added))))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if tok.VocabSize() != def.VocabSize() || !strings.HasPrefix(tok.Name(), "hf-") {
		t.Errorf("VocabSize %d Name %q", tok.VocabSize(), tok.Name())
	}
	for _, c := range reference(t) {
		if raceEnabled && c.Name == "prompt" {
			continue
		}
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Fatalf("%s: %s", c.Name, diffIDs(tok, c.IDs, got))
		}
		if got, want := tok.EncodeOrdinary(c.Text), def.EncodeOrdinary(c.Text); !slices.Equal(got, want) {
			t.Fatalf("%s ordinary: %s", c.Name, diffIDs(tok, want, got))
		}
	}
}

// lastMerge runs rank BPE on a token's bytes until two parts remain: the
// pair whose merge creates the token.
func lastMerge(t *bpeTokenizer, s string) (string, string) {
	cuts := make([]int, len(s)+1) // part i is s[cuts[i]:cuts[i+1]]
	for i := range cuts {
		cuts[i] = i
	}
	for len(cuts) > 3 {
		best, at := noRank, -1
		for i := 0; i+2 < len(cuts); i++ {
			if r := t.rank(s[cuts[i]:cuts[i+2]]); r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			panic(fmt.Sprintf("%q: no merge among %v", s, cuts))
		}
		cuts = slices.Delete(cuts, at+1, at+2)
	}
	return s[:cuts[1]], s[cuts[1]:]
}

// tinyModel is a valid byte-level BPE: the 256 bytes, then "ab", "abc", "  ".
func tinyModel() map[string]any {
	vocab := map[string]uint32{}
	for b := 0; b < 256; b++ {
		vocab[vocabfile.EncodeByteLevel([]byte{byte(b)})] = uint32(b)
	}
	vocab["ab"], vocab["abc"], vocab["ĠĠ"] = 256, 257, 258
	merges := [][2]string{{"a", "b"}, {"ab", "c"}, {"Ġ", "Ġ"}}
	added := []map[string]any{{"id": 259, "content": "<|end|>", "special": true}}
	return hfJSON(vocab, merges, added)
}

func TestLoadTiny(t *testing.T) {
	tok, err := Load(bytes.NewReader(mustJSON(t, tinyModel())))
	if err != nil {
		t.Fatal(err)
	}
	// Older files (Llama 3) spell merges as "a b" strings.
	m := tinyModel()
	m["model"].(map[string]any)["merges"] = []string{"a b", "ab c", "Ġ Ġ"}
	tok2, err := Load(bytes.NewReader(mustJSON(t, m)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want []uint32
	}{
		{"abc", []uint32{257}},
		{"abab", []uint32{256, 256}},
		{"cab", []uint32{'c', 256}},
		{"x  <|end|>", []uint32{'x', 258, 259}},
		{"12", []uint32{'1', '2'}},
	} {
		if got := tok.Encode(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.in, got, tc.want)
		}
		if got := tok2.Encode(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("string merges: Encode(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if got := tok.EncodeOrdinary("<|end|>"); len(got) != 7 {
		t.Errorf("EncodeOrdinary matched the special token: %v", got)
	}
}

// TestLoadRefuses: every file whose ids rank = id BPE cannot reproduce is
// refused with ErrUnsupported rather than tokenized approximately.
func TestLoadRefuses(t *testing.T) {
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	for name, mutate := range map[string]func(map[string]any){
		"NFKC normalizer": func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} },
		"lowercase":       func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} },
		"GPT-2 byte-level": func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
		},
		"other regex": func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+|\w+`}
		},
		"metaspace decoder":   func(m map[string]any) { m["decoder"] = map[string]any{"type": "Metaspace"} },
		"unigram":             func(m map[string]any) { model(m)["type"] = "Unigram" },
		"byte fallback":       func(m map[string]any) { model(m)["byte_fallback"] = true },
		"dropout":             func(m map[string]any) { model(m)["dropout"] = 0.1 },
		"subword prefix":      func(m map[string]any) { model(m)["continuing_subword_prefix"] = "##" },
		"merges out of order": func(m map[string]any) { model(m)["merges"] = [][2]string{{"ab", "c"}, {"a", "b"}, {"Ġ", "Ġ"}} },
		"token without merge": func(m map[string]any) { model(m)["merges"] = [][2]string{{"a", "b"}, {"Ġ", "Ġ"}} },
		"duplicate merge": func(m map[string]any) {
			model(m)["merges"] = [][2]string{{"a", "b"}, {"ab", "c"}, {"a", "b"}, {"Ġ", "Ġ"}}
		},
		"merge of unknown": func(m map[string]any) {
			model(m)["merges"] = [][2]string{{"a", "b"}, {"ab", "c"}, {"Ġ", "Ġ"}, {"x", "y"}}
		},
		"missing byte": func(m map[string]any) {
			delete(model(m)["vocab"].(map[string]uint32), "z")
		},
		"not byte-level": func(m map[string]any) { model(m)["vocab"].(map[string]uint32)["▁x"] = 300 },
		"added id twice": func(m map[string]any) {
			m["added_tokens"] = []map[string]any{{"id": 259, "content": "<|end|>"}, {"id": 259, "content": "<|x|>"}}
		},
		// Hugging Face matches a normalized added token by its normalized
		// content: "e\u0301" would match the "é" that NFC makes of it.
		"normalized added token not in NFC": func(m map[string]any) {
			m["added_tokens"] = []map[string]any{{"id": 259, "content": "<e\u0301>", "normalized": true}}
		},
		"lstrip added token": func(m map[string]any) {
			m["added_tokens"] = []map[string]any{{"id": 259, "content": "<|end|>", "special": true, "lstrip": true}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := tinyModel()
			mutate(m)
			_, err := Load(bytes.NewReader(mustJSON(t, m)))
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("Load = %v, want ErrUnsupported", err)
			}
		})
	}
	if _, err := Load(strings.NewReader("{not json")); err == nil {
		t.Error("Load accepted broken JSON")
	}
}

// FuzzLoad: Load never panics on a malformed tokenizer.json, and what it
// accepts encodes and decodes its own inputs.
func FuzzLoad(f *testing.F) {
	f.Add(mustJSON(f, tinyModel()))
	m := tinyModel()
	m["added_tokens"] = []map[string]any{{"id": 4000000000, "content": "x"}}
	f.Add(mustJSON(f, m))
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[["a","a"]]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":99999999},"merges":"x"}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		tok, err := Load(bytes.NewReader(doc))
		if err != nil {
			return
		}
		for _, s := range []string{"abc  <|end|>", "hello wörld 123"} {
			if got := tok.Decode(tok.Encode(s)); got != s {
				t.Fatalf("round trip %q → %q", s, got)
			}
		}
	})
}
