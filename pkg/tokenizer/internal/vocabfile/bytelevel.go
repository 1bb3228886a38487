package vocabfile

// GPT-2's byte-level alphabet: every byte is shown as a printable rune so that
// vocabularies can be stored as JSON strings. Printable Latin-1 bytes stand for
// themselves; the remaining bytes, in increasing order, get runes from U+0100 up.
var byteToRune [256]rune

// runeToByte inverts byteToRune; -1 marks runes outside the alphabet.
var runeToByte [512]int16

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// decodeByteLevel turns a vocabulary string into the bytes it stands for.
func decodeByteLevel(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return nil, false
		}
		out = append(out, byte(runeToByte[r]))
	}
	return out, true
}

// EncodeByteLevel is the inverse of the byte-level decoding; used by tests
// and tools that need to show token bytes the way tokenizer.json spells them.
func EncodeByteLevel(b []byte) string {
	rs := make([]rune, len(b))
	for i, c := range b {
		rs[i] = byteToRune[c]
	}
	return string(rs)
}
