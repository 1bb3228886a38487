package chat

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonString decodes a JSON string literal that a json.Decoder has already
// validated (a json.RawMessage field of a decoded body). Agent prompts are
// mostly such strings, hundreds of KB of them; decoding them with
// json.Unmarshal would scan every byte twice more. Anything outside the
// fast path (invalid UTF-8, which encoding/json replaces with U+FFFD) goes
// through json.Unmarshal, so the result is always json.Unmarshal's.
func jsonString(raw []byte) (string, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || !utf8.Valid(raw) {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	body := raw[1 : len(raw)-1]
	i := bytes.IndexByte(body, '\\')
	if i < 0 {
		return string(body), nil
	}
	var b strings.Builder
	b.Grow(len(body))
	b.Write(body[:i])
	for i < len(body) {
		c := body[i]
		if c != '\\' {
			j := bytes.IndexByte(body[i:], '\\')
			if j < 0 {
				b.Write(body[i:])
				break
			}
			b.Write(body[i : i+j])
			i += j
			continue
		}
		if i+1 >= len(body) {
			return slowString(raw)
		}
		switch e := body[i+1]; e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(body[i+2:])
			if !ok {
				return slowString(raw)
			}
			i += 6
			if utf16.IsSurrogate(r) {
				// A pair is one rune; a lone half is U+FFFD, as in encoding/json.
				if len(body) >= i+6 && body[i] == '\\' && body[i+1] == 'u' {
					if r2, ok := hex4(body[i+2:]); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							b.WriteRune(dec)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			b.WriteRune(r)
			continue
		default:
			return slowString(raw)
		}
		i += 2
	}
	return b.String(), nil
}

func slowString(raw []byte) (string, error) {
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
