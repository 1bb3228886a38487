package tokenizer

import "unicode/utf8"

// StreamDecoder turns ids into text as they are generated. Byte-level tokens
// can end in the middle of a multi-byte character; the decoder holds such a
// tail back until the rest arrives, so every string it returns is complete
// UTF-8 unless the tokens themselves were invalid (invalid bytes are passed
// through as they come, never held). The concatenation of everything Next
// and Flush return equals Decode of all ids.
type StreamDecoder struct {
	t       *bpeTokenizer
	decode  func([]uint32) string
	pending []byte
	one     [1]uint32
}

// NewStreamDecoder returns a decoder for ids of t.
func NewStreamDecoder(t Tokenizer) *StreamDecoder {
	d := &StreamDecoder{}
	if b, ok := t.(*bpeTokenizer); ok {
		d.t = b
	} else {
		d.decode = t.Decode
	}
	return d
}

// Next adds one id and returns the text that became complete.
func (d *StreamDecoder) Next(id uint32) string {
	if d.t != nil {
		d.pending = append(d.pending, d.t.tokenText(id)...)
	} else {
		d.one[0] = id
		d.pending = append(d.pending, d.decode(d.one[:])...)
	}
	keep := incompleteTail(d.pending)
	if keep == len(d.pending) {
		return ""
	}
	out := string(d.pending[:len(d.pending)-keep])
	d.pending = append(d.pending[:0], d.pending[len(d.pending)-keep:]...)
	return out
}

// Flush returns whatever is held back (an incomplete character at the end of
// the stream) and resets the decoder.
func (d *StreamDecoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// incompleteTail returns how many bytes at the end of b are the beginning of
// a multi-byte character that more bytes could still complete.
func incompleteTail(b []byte) int {
	// A character is at most 4 bytes, so only the last 3 can be incomplete.
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return 0 // ASCII: nothing after it is pending unless it is a lead byte
		}
		if c >= 0xC0 { // a lead byte
			if !utf8.FullRune(b[len(b)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}
