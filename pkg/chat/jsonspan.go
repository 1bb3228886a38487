package chat

import "bytes"

// Finding where things are in a body that encoding/json has already
// accepted. These functions do not validate: on valid JSON they are exact,
// on anything else they return -1 (or false) somewhere, and never panic.

// arraySpan is where the top-level array member of a body is.
type arraySpan struct {
	start int   // offset of its '['
	end   int   // offset just past its ']'
	ends  []int // ends[i] is the offset just past element i
}

// findArray locates the top-level member named field (matched as
// encoding/json matches keys to struct fields: case-insensitively) when it
// is an array and the only member of that name.
func findArray(body []byte, field string) (arraySpan, bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return arraySpan{}, false
	}
	var span arraySpan
	found := false
	for i = skipSpace(body, i+1); i < len(body) && body[i] != '}'; {
		v, match := memberValue(body, i, field)
		if v < 0 {
			return arraySpan{}, false
		}
		if match {
			if found || body[v] != '[' {
				return arraySpan{}, false
			}
			found = true
			span.start = v
			if i, span.ends = arrayEnds(body, v+1, nil); i < 0 {
				return arraySpan{}, false
			}
			span.end = i
		} else if i = skipValue(body, v); i < 0 {
			return arraySpan{}, false
		}
		if i = nextMember(body, i); i < 0 {
			return arraySpan{}, false
		}
	}
	return span, found
}

// restOfArray continues findArray from offset i inside the array (just past
// an element): it appends the ends of the remaining elements to ends and
// checks that no later member has the array's name.
func restOfArray(body []byte, i int, field string, ends []int) (arrayEnd int, _ []int, ok bool) {
	if i = skipSpace(body, i); i >= len(body) {
		return 0, nil, false
	}
	switch body[i] {
	case ',':
		i++
	case ']':
	default:
		return 0, nil, false
	}
	if arrayEnd, ends = arrayEnds(body, i, ends); arrayEnd < 0 {
		return 0, nil, false
	}
	for i = nextMember(body, arrayEnd); i >= 0 && i < len(body) && body[i] != '}'; i = nextMember(body, i) {
		v, match := memberValue(body, i, field)
		if v < 0 || match {
			return 0, nil, false
		}
		i = skipValue(body, v)
	}
	return arrayEnd, ends, i >= 0
}

// arrayEnds reads array elements from i (at an element or at the closing
// ']') and returns the offset past the ']' and the elements' ends.
func arrayEnds(body []byte, i int, ends []int) (int, []int) {
	if i = skipSpace(body, i); i < len(body) && body[i] == ']' {
		return i + 1, ends
	}
	for i >= 0 && i < len(body) {
		if i = skipValue(body, i); i < 0 {
			return -1, nil
		}
		ends = append(ends, i)
		if i = skipSpace(body, i); i >= len(body) {
			break
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case ']':
			return i + 1, ends
		default:
			return -1, nil
		}
	}
	return -1, nil
}

// memberValue reads the object member key at i and returns the offset of
// its value and whether the key names field.
func memberValue(body []byte, i int, field string) (int, bool) {
	end := skipString(body, i)
	if end < 0 {
		return -1, false
	}
	key, err := jsonString(body[i:end])
	if err != nil {
		return -1, false
	}
	if i = skipSpace(body, end); i >= len(body) || body[i] != ':' {
		return -1, false
	}
	if i = skipSpace(body, i+1); i >= len(body) {
		return -1, false
	}
	return i, keyMatches(key, field)
}

// keyMatches is encoding/json's rule for which struct field a key fills:
// the exact name, else any name equal under Unicode case folding. (The
// request types have no two fields that fold alike.)
func keyMatches(key, field string) bool {
	return key == field || bytes.EqualFold([]byte(key), []byte(field))
}

// nextMember moves from just past a member's value to the next member's
// key, or to the object's closing '}'.
func nextMember(body []byte, i int) int {
	if i < 0 {
		return -1
	}
	if i = skipSpace(body, i); i >= len(body) {
		return -1
	}
	switch body[i] {
	case ',':
		return skipSpace(body, i+1)
	case '}':
		return i
	}
	return -1
}

// skipValue returns the offset just past the value starting at i.
func skipValue(body []byte, i int) int {
	if i < 0 || i >= len(body) {
		return -1
	}
	switch body[i] {
	case '"':
		return skipString(body, i)
	case '{', '[':
		depth := 0
		for i < len(body) {
			switch body[i] {
			case '"':
				if i = skipString(body, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// A number or a literal runs to the next delimiter.
	for i < len(body) {
		switch body[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipString returns the offset just past the string literal at i.
func skipString(body []byte, i int) int {
	if i >= len(body) || body[i] != '"' {
		return -1
	}
	for i++; i < len(body); {
		j := bytes.IndexByte(body[i:], '"')
		if j < 0 {
			return -1
		}
		q := i + j
		// The quote is escaped when an odd number of backslashes precede it.
		bs := 0
		for k := q - 1; k >= i && body[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
	return -1
}

func skipSpace(body []byte, i int) int {
	for i < len(body) {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// commonPrefixLen is the length of the longest common prefix of a and b.
func commonPrefixLen(a, b []byte) int {
	n := min(len(a), len(b))
	// Whole chunks by memequal first: bodies share hundreds of KB.
	const chunk = 1024
	i := 0
	for i+chunk <= n && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
		i += chunk
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}
