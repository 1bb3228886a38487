package chat

import (
	"sort"
	"unicode/utf8"

	"switchyard.dev/pkg/extent"
)

// PrevBody is what decoding one session's request body leaves for the
// session's next body: the body and its decoded message array (messages, or
// Responses' input items), with where each element ends.
//
// An agent's next request repeats the previous one's messages byte for byte
// and appends a few, so decoding it again from scratch (encoding/json scans
// every byte twice: once to validate, once to decode) is most of the cost of
// a warm 100k-token turn. With a PrevBody, the elements inside the longest
// common byte prefix of the two bodies are reused and encoding/json decodes
// only the rest: the body with that run of elements cut out. The result is
// the full decode's, because
//
//   - the cut-out elements are the very bytes the previous body had, and an
//     element decodes the same wherever it stands (into a zero value);
//   - cutting them out leaves encoding/json's scanner in the same state
//     (inside the member's array, after an element) at the same depth, so
//     the shortened body is valid JSON exactly when the whole body is;
//   - the array must be the only member of its name (matched as encoding/json
//     matches keys), so no other member decodes into the same field.
//
// Any error, or anything the shortcut does not cover, falls back to decoding
// the whole body, so errors are always the full decode's.
//
// A PrevBody is immutable once returned (callers may share it between
// goroutines); the requests decoded with it share the reused elements and
// must not modify them.
type PrevBody struct {
	body []byte
	span arraySpan
	// elems and span.ends may have room past their length that the next
	// body's new elements are appended into (extent, as a Session's tokens
	// are): an agent's history of a thousand messages is not copied at
	// every turn. What a request gets is capped at the length.
	elems    any // []T of the API whose body this is
	elemsExt *extent.Extent
	endsExt  *extent.Extent
	// norms are the body's messages normalised (nil when one does not
	// normalise, and for Responses bodies), with room past their length as
	// elems have: a Chat Completions body's one for each element, an
	// Anthropic body's the system message first (normSystem) and then each
	// element's forms, ending at normEnds.
	norms       []Message
	normsExt    *extent.Extent
	normEnds    []int
	normEndsExt *extent.Extent
	normSystem  bool
	reused      int
	// shared is how many leading bytes of this body are the previous
	// body's, ending at a character boundary of it (0 when the body was
	// decoded whole).
	shared int
}

// Reused is how many elements of this body's array were reused from the
// previous body's (0 when the body was decoded whole).
func (p *PrevBody) Reused() int { return p.reused }

var errNotUTF8 = badRequest("", "the request body is not valid UTF-8")

// arrayBody is what incremental decoding needs to know of one API's body.
type arrayBody[R, T any] struct {
	field string // the top-level array member: "messages" or "input"
	// decode unmarshals a whole body into a request, elements included.
	decode func(body []byte) (*R, error)
	// elems is the decoded array, or nil when the member is not an array.
	elems func(*R) *[]T
	// setArray, if set, tells a request decoded from a shortened body the
	// raw bytes of its whole array (Responses keeps input raw).
	setArray func(r *R, raw []byte)
}

// decodeBody decodes body, reusing prev's elements when it extends prev's
// body, and returns what the next body of the session can reuse (nil when
// nothing can).
//
// A body that is not UTF-8 is a RequestError, whatever else is wrong with
// it, as OpenAI and Anthropic answer: JSON text must be UTF-8 (RFC 8259
// §8.1), and encoding/json would quietly turn the bad bytes into U+FFFD, so
// the model would read other text than the client sent. Only the part past
// what the body shares with prev is checked: prev passed (every PrevBody
// comes from here), and at 100k tokens the shared part is half a megabyte.
func decodeBody[R, T any](a arrayBody[R, T], body []byte, prev *PrevBody) (*R, *PrevBody, error) {
	if prev != nil {
		if r, next, ok := decodeAfter(a, body, prev); ok {
			if !utf8.Valid(body[next.shared:]) {
				return nil, nil, errNotUTF8
			}
			return r, next, nil
		}
	}
	if !utf8.Valid(body) {
		return nil, nil, errNotUTF8
	}
	r, err := a.decode(body)
	if err != nil {
		return nil, nil, err
	}
	return r, remember(a, body, r), nil
}

// remember is what a fully decoded body leaves for the next.
func remember[R, T any](a arrayBody[R, T], body []byte, r *R) *PrevBody {
	elems := a.elems(r)
	if elems == nil {
		return nil
	}
	span, ok := findArray(body, a.field)
	if !ok || len(span.ends) != len(*elems) {
		return nil
	}
	return &PrevBody{body: body, span: span, elems: *elems}
}

// decodeAfter is the incremental decode; ok is false when it does not apply
// or the shortened body does not decode.
func decodeAfter[R, T any](a arrayBody[R, T], body []byte, prev *PrevBody) (*R, *PrevBody, bool) {
	prevElems, ok := prev.elems.([]T)
	if !ok {
		return nil, nil, false // another API's body
	}
	common := commonPrefixLen(prev.body, body)
	// keep = how many of prev's elements lie wholly inside the common prefix.
	keep := sort.Search(len(prev.span.ends), func(i int) bool { return prev.span.ends[i] > common })
	if keep == 0 {
		return nil, nil, false
	}
	cut := prev.span.ends[keep-1]
	// The shortened body: up to the array's '[', one empty placeholder
	// element (decodes to the zero element, dropped below), then everything
	// after the kept elements.
	const placeholder = "[{}"
	short := make([]byte, 0, prev.span.start+len(placeholder)+len(body)-cut)
	short = append(short, body[:prev.span.start]...)
	short = append(short, placeholder...)
	short = append(short, body[cut:]...)
	r, err := a.decode(short)
	if err != nil {
		return nil, nil, false
	}
	decoded := a.elems(r)
	if decoded == nil || len(*decoded) == 0 {
		return nil, nil, false
	}
	// The rest of the whole body's array, and the check that no member after
	// it has the same name; the body is valid JSON, as the short one is.
	// An array with more elements than decoded makes restOfArray append
	// past the room claimed, where no other body can have claimed any (and
	// the body is then decoded whole). A body that fails from here on
	// leaves the room claimed: later bodies from prev copy.
	added := len(*decoded) - 1
	ends, endsExt := extent.Extend(prev.span.ends[:keep], prev.endsExt, added)
	arrayEnd, ends, ok := restOfArray(body, cut, a.field, ends)
	if !ok || len(ends) != keep+added {
		return nil, nil, false
	}
	elems, elemsExt := extent.Extend(prevElems[:keep], prev.elemsExt, added)
	elems = append(elems, (*decoded)[1:]...)
	*decoded = elems[:len(elems):len(elems)]
	span := arraySpan{start: prev.span.start, end: arrayEnd, ends: ends}
	if a.setArray != nil {
		a.setArray(r, body[span.start:span.end])
	}
	// Back to a character boundary of the previous body, so that the bytes
	// before it are whole UTF-8 sequences of it.
	shared := common
	for shared > 0 && shared < len(prev.body) && !utf8.RuneStart(prev.body[shared]) {
		shared--
	}
	return r, &PrevBody{body: body, span: span, elems: elems, elemsExt: elemsExt, endsExt: endsExt, reused: keep, shared: shared}, true
}
