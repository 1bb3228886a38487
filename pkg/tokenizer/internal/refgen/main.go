// Command refgen writes the inputs of the tokenizer's differential test: a
// hand-picked corpus, deterministic fuzz-style strings and a ~100k-token
// agent prompt built from GOROOT. testdata/reference.js then encodes them
// with Hugging Face tokenizers (npm) to produce the expected ids.
//
//	go run ./tokenizer/internal/refgen -out /tmp/inputs.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

type input struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

func main() {
	out := flag.String("out", "", "file to write")
	fuzz := flag.Int("fuzz", 2000, "number of random strings")
	dense := flag.Int("dense", 1000, "number of random strings over a tiny alphabet of tricky characters")
	flag.Parse()
	var in []input
	for i, s := range corpus {
		in = append(in, input{fmt.Sprintf("corpus/%d", i), s})
	}
	rng := rand.New(rand.NewPCG(20261129, 6))
	for i := range *fuzz {
		in = append(in, input{fmt.Sprintf("fuzz/%d", i), fuzzString(rng)})
	}
	for i := range *dense {
		in = append(in, input{fmt.Sprintf("dense/%d", i), denseString(rng)})
	}
	p, err := prompt()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	in = append(in, input{"prompt", p})
	b, _ := json.Marshal(in)
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var corpus = []string{
	"Hello, world!",
	"It's a dog's life; they're here, we've gone, I'm sure you'll see, he'd know.",
	"IT'S WE'VE YOU'LL THEY'RE I'M HE'D 'S 'T 'Re 'vE 'lL ''s '' 's x'sy ſ 'ſ 'ſt",
	"   leading spaces and trailing spaces   ",
	"a\n  \n  b\n\n\n\tc\r\n\r\n  d \n",
	"x\n  \n  ",
	"tabs\tand\t\tmore\t\t\ttabs",
	"line1\r\nline2\rline3\n\rline4",
	"numbers 1 12 123 1234 12345 3.14159 -42 1e10 0x1F ١٢٣ １２３ ² ½ Ⅻ",
	"func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {\n\t\tx += i\n\t}\n}\n",
	`{"role": "user", "content": "hi", "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}`,
	"日本語のテキストと中文文本，还有한국어 텍스트。",
	"Emoji: 🎉🚀👍🏽 👨‍👩‍👧‍👦 🇺🇸🇯🇵 ❤️ ✨",
	"Accents: café naïve résumé Ångström São Paulo Zürich",
	"Decomposed: cafe\u0301 nai\u0308ve A\u030angstro\u0308m \u1100\u1161\u11a8",
	"Combining: a\u0301\u0302\u0303 q\u0307\u0323 \u20dd\u0301x",
	"Whitespace zoo: a\u00a0b\u2003c\u3000d\u200be\u2028f\u000bg\u000ch\u0085i",
	"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
	"<think>\nLet me think.\n</think>\n\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call><|im_end|>",
	"<|im_sta <|im_end <|endoftext|><|endoftext|> <|im_start|><|im_start|>x <|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
	"Ελληνικά και Русский текст, العربية, हिन्दी, ภาษาไทย",
	strings.Repeat("a", 1000),
	strings.Repeat(" ", 700) + "x",
	strings.Repeat("ab", 400),
	strings.Repeat("9", 300),
	strings.Repeat("=-", 300),
	strings.Repeat("\n", 50) + strings.Repeat("\t", 50),
	"https://example.com/path?q=1&r=two#frag user@example.com C:\\Windows\\System32",
	"    def foo(self, x: int) -> str:\n        return f\"{x!r:>10}\"  # comment\n",
	"SELECT * FROM users WHERE id = 42 AND name LIKE '%o''brien%';",
	"base64: SGVsbG8gV29ybGQhIFRoaXMgaXMgYSB0ZXN0IG9mIGJhc2U2NCBlbmNvZGluZy4=",
	"x",
	" ",
	"\n",
	"",
	"'",
	"a'",
	"''''",
	" !",
	"  !",
	" \t!",
	"a  \u3000b",
	"ÀÉÎÕÜ àéîõü ÆŒæœ ß ẞ İ ı ǅ ǈ ǋ",
}

// Fragments the fuzz strings are made of: scripts, emoji, unusual spaces,
// combining marks, contractions, digits of every kind, punctuation, code and
// the added tokens (whole and broken).
var fragments = []string{
	"the", "The", "HTTP", "fooBar", "snake_case", "x", "aaaa", "über", "naïve", "ſtraße",
	"привет", "Ωμέγα", "日本", "中文字", "한국", "مرحبا", "नमस्ते", "สวัสดี", "ქართ", "עברית",
	"🎉", "👍🏽", "👨‍💻", "🇩🇪", "❤️", "©", "™", "∑", "→", "€", "£", "¥",
	" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\n ", "\u00a0", "\u2003", "\u3000",
	"\u200b", "\u2028", "\u2029", "\u000b", "\u000c", "\u0085", "\u1680", "\u202f", "\u205f",
	"\u0301", "\u0308", "\u0327", "\u20dd", "e\u0301", "\u1100\u1161", "\u0915\u094d",
	"'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'ſ", "'x", "'", "’s",
	"0", "7", "42", "123", "2024", "3.14", "١٢", "１２", "²", "½", "Ⅻ", "٣", "߂", "〇",
	".", ",", "!", "?", "...", "--", "==", "!=", ":=", "->", "=>", "{", "}", "(", ")", "[", "]",
	"\"", "`", "```", "#", "//", "/*", "*/", "<", ">", "</", "/>", "&&", "||", "@", "$", "%", "^",
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
	"</tool_call>", "<|im_", "|>", "<|", "<|fim_pad|>",
	"func", "return", "if err != nil", "{\"a\": 1}", "[1, 2]", "null", "true",
}

func fuzzString(rng *rand.Rand) string {
	var b strings.Builder
	n := 1 + rng.IntN(24)
	for range n {
		switch rng.IntN(10) {
		case 0: // a random code point from a few interesting ranges
			ranges := [][2]rune{{0x20, 0x7e}, {0xa0, 0x24f}, {0x300, 0x36f}, {0x370, 0x52f},
				{0x2000, 0x206f}, {0x3000, 0x30ff}, {0x4e00, 0x4fff}, {0xac00, 0xac40},
				{0x1f300, 0x1f64f}, {0x0, 0x1f}, {0xff00, 0xffef}, {0x1d400, 0x1d4ff}}
			r := ranges[rng.IntN(len(ranges))]
			b.WriteRune(r[0] + rune(rng.IntN(int(r[1]-r[0]+1))))
		case 1:
			b.WriteString(strings.Repeat(fragments[rng.IntN(len(fragments))], 1+rng.IntN(5)))
		default:
			b.WriteString(fragments[rng.IntN(len(fragments))])
		}
	}
	return b.String()
}

// tricky are the characters at which the split regex's alternatives
// compete: spaces of several kinds next to newlines, apostrophes next to
// contraction letters, letters, digits, symbols, combining marks.
var tricky = []string{" ", " ", " ", "\n", "\n", "\r", "\t", "\u00a0", "\u3000", "\u2028", "\u000b",
	"'", "'", "s", "S", "t", "l", "e", "r", "v", "d", "m", "ſ", "a", "é", "e\u0301", "\u0301", "中",
	"1", "2", "٣", "½", "!", ".", "{", "-", "🎉", "<|im_end|>", "<think>"}

// denseString is a short string over the tricky characters, so that the
// scanner's boundary cases occur many times in few bytes.
func denseString(rng *rand.Rand) string {
	var b strings.Builder
	for range 1 + rng.IntN(16) {
		b.WriteString(tricky[rng.IntN(len(tricky))])
	}
	return b.String()
}

var tags = regexp.MustCompile(`<[^>]*>`)

// prompt builds an agent-shaped prompt of about 100k tokens: prose, Go
// source and JSON from GOROOT, wrapped in ChatML turns every ~4 KB.
func prompt() (string, error) {
	// The go command's GOROOT: runtime.GOROOT (deprecated) is empty in a
	// binary built with -trimpath, and the files would not be found.
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	root := strings.TrimSpace(string(out))
	files := []string{
		"doc/go_mem.html",
		"src/net/http/server.go",
		"src/context/context.go",
		"src/sync/mutex.go",
		"src/strings/builder.go",
		"src/sort/sort.go",
		"src/crypto/tls/bogo_config.json",
		"src/cmd/vendor/golang.org/x/telemetry/package-lock.json",
		"doc/go_spec.html",
	}
	var parts []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		s := string(b)
		if strings.HasSuffix(f, ".html") {
			s = tags.ReplaceAllString(s, "")
		}
		parts = append(parts, s)
	}
	text := strings.Join(parts, "\n\n") + "\n日本語のテキスト、café, naïve, 👍🏽🎉 — done.\n"
	if len(text) > 400_000 {
		text = text[:400_000]
		for !utf8ValidEnd(text) {
			text = text[:len(text)-1]
		}
	}
	var b strings.Builder
	b.WriteString("<|im_start|>system\nYou are a coding agent.<|im_end|>\n")
	roles := []string{"user", "assistant", "tool"}
	for i := 0; len(text) > 0; i++ {
		n := min(4096, len(text))
		for n < len(text) && !utf8Start(text[n]) {
			n++
		}
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", roles[i%3], text[:n])
		text = text[n:]
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String(), nil
}

func utf8Start(c byte) bool      { return c&0xC0 != 0x80 }
func utf8ValidEnd(s string) bool { return len(s) > 0 && s[len(s)-1] < 0x80 }
