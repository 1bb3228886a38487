package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// A hand-written scanner for the Qwen2/Qwen3 split regex
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// and Llama 3's variant with \p{N}{1,3}. Go's regexp has no lookahead, and
// backtracking regex engines are ten times slower than this; the scanner
// mirrors the regex's leftmost-first alternation step by step (see next).
//
// Character classes: \p{L} = unicode.IsLetter, \p{N} = unicode.IsNumber, \s =
// unicode.IsSpace (both are the Unicode White_Space property). A byte that is
// not valid UTF-8 is treated as one "other" character, so every input,
// valid or not, is split into pieces that cover it exactly.

type charClass uint8

const (
	classOther   charClass = iota // none of the below: punctuation, symbols, marks, controls
	classLetter                   // \p{L}
	classNumber                   // \p{N}
	classSpace                    // \s except CR and LF
	classNewline                  // \r or \n
)

var asciiClass = func() (t [128]charClass) {
	for c := 0; c < 128; c++ {
		r := rune(c)
		switch {
		case r == '\r' || r == '\n':
			t[c] = classNewline
		case unicode.IsSpace(r):
			t[c] = classSpace
		case unicode.IsLetter(r):
			t[c] = classLetter
		case unicode.IsNumber(r):
			t[c] = classNumber
		}
	}
	return t
}()

// classAt returns the class of the character at s[i] and its width in bytes.
func classAt(s string, i int) (charClass, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && n == 1:
		return classOther, 1
	case unicode.IsLetter(r):
		return classLetter, n
	case unicode.IsNumber(r):
		return classNumber, n
	case unicode.IsSpace(r):
		return classSpace, n
	}
	return classOther, n
}

// scanner splits text into pre-tokens.
type scanner struct {
	maxDigits int // 1 for Qwen2/3, 3 for Llama 3
}

// next returns the end of the pre-token that starts at s[i] (i < len(s)).
// The cases are tried in the order of the regex's alternatives, because the
// regex takes the first alternative that matches, not the longest.
func (sc scanner) next(s string, i int) int {
	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if n := contraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	c, n := classAt(s, i)
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if c == classLetter {
		return letterRun(s, i+n)
	}
	if (c == classOther || c == classSpace) && i+n < len(s) {
		if c2, n2 := classAt(s, i+n); c2 == classLetter {
			return letterRun(s, i+n+n2)
		}
	}
	// 3. \p{N} or \p{N}{1,3}
	if c == classNumber {
		j := i + n
		for k := 1; k < sc.maxDigits && j < len(s); k++ {
			c2, n2 := classAt(s, j)
			if c2 != classNumber {
				break
			}
			j += n2
		}
		return j
	}
	// 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if c == classSpace && s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 == classOther {
			j = i + 1
		}
	}
	if c == classOther || j > i {
		for j < len(s) {
			c2, n2 := classAt(s, j)
			if c2 != classOther {
				break
			}
			j += n2
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// 5. Whitespace (c is classSpace or classNewline): find the run [i, e).
	e, lastStart, afterNewline := i, i, -1
	for e < len(s) {
		c2, n2 := classAt(s, e)
		if c2 == classNewline {
			afterNewline = e + n2
		} else if c2 != classSpace {
			break
		}
		lastStart = e
		e += n2
	}
	switch {
	case afterNewline >= 0: // \s*[\r\n]+ backtracks to the last CR/LF of the run
		return afterNewline
	case e == len(s): // \s+(?!\S) at the end of the text takes the whole run
		return e
	case lastStart > i: // \s+(?!\S) leaves the last space for the next word
		return lastStart
	}
	return i + n // \s+ on a single space before a non-space
}

// letterRun returns the end of the run of letters starting at j.
func letterRun(s string, j int) int {
	for j < len(s) {
		c, n := classAt(s, j)
		if c != classLetter {
			break
		}
		j += n
	}
	return j
}

// contraction returns the length of a case-insensitive s, t, m, d, re, ve or
// ll at the start of s, or 0. Case folding is Unicode's: 'ſ' (U+017F, LATIN
// SMALL LETTER LONG S) folds to 's'.
func contraction(s string) int {
	if len(s) == 0 {
		return 0
	}
	switch s[0] | 0x20 {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) >= 2 && s[1]|0x20 == 'e' {
			return 2
		}
	case 'l':
		if len(s) >= 2 && s[1]|0x20 == 'l' {
			return 2
		}
	}
	if len(s) >= 2 && s[0] == 0xC5 && s[1] == 0xBF { // ſ
		return 2
	}
	return 0
}
