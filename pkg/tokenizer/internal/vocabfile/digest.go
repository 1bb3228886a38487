package vocabfile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The digest is a gzip stream of
//
//	magic "SWTOK1\n"
//	uvarint len, name
//	byte pattern, byte normalizer
//	uvarint n, then n × (uvarint len, bytes)      model tokens in id order; len 0 = no token
//	uvarint m, then m × (uvarint id, byte flags, uvarint len, content)
//
// flags: bit 0 special, bit 1 normalized. It is what tokenizer.json says,
// already validated and with the byte-level spelling undone, so loading it is
// a gunzip and one pass (no JSON, no checks to repeat).
const digestMagic = "SWTOK1\n"

const (
	flagSpecial    = 1
	flagNormalized = 2
)

// WriteDigest writes s in the digest format.
func (s *Spec) WriteDigest(w io.Writer) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(zw)
	var tmp [binary.MaxVarintLen64]byte
	uv := func(v uint64) { bw.Write(tmp[:binary.PutUvarint(tmp[:], v)]) }
	bw.WriteString(digestMagic)
	uv(uint64(len(s.Name)))
	bw.WriteString(s.Name)
	bw.WriteByte(byte(s.Pattern))
	bw.WriteByte(byte(s.Normalizer))
	uv(uint64(len(s.Vocab)))
	for _, b := range s.Vocab {
		uv(uint64(len(b)))
		bw.Write(b)
	}
	uv(uint64(len(s.Added)))
	for _, a := range s.Added {
		uv(uint64(a.ID))
		var f byte
		if a.Special {
			f |= flagSpecial
		}
		if a.Normalized {
			f |= flagNormalized
		}
		bw.WriteByte(f)
		uv(uint64(len(a.Content)))
		bw.WriteString(a.Content)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

var errDigest = errors.New("tokenizer: corrupt digest")

// ReadDigest reads a digest written by WriteDigest. The returned Vocab slices
// share one backing buffer.
func ReadDigest(r io.Reader) (*Spec, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: digest: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(2 << 20)
	if _, err := buf.ReadFrom(zr); err != nil {
		return nil, fmt.Errorf("tokenizer: digest: %w", err)
	}
	d := buf.Bytes()
	if !bytes.HasPrefix(d, []byte(digestMagic)) {
		return nil, errDigest
	}
	d = d[len(digestMagic):]
	fail := false
	uv := func() uint64 {
		v, n := binary.Uvarint(d)
		if n <= 0 {
			fail = true
			return 0
		}
		d = d[n:]
		return v
	}
	take := func(n uint64) []byte {
		if fail || n > uint64(len(d)) {
			fail = true
			return nil
		}
		b := d[:n:n]
		d = d[n:]
		return b
	}
	s := &Spec{}
	s.Name = string(take(uv()))
	hdr := take(2)
	if fail {
		return nil, errDigest
	}
	s.Pattern, s.Normalizer = Pattern(hdr[0]), Normalizer(hdr[1])
	n := uv()
	if n > uint64(len(d)) {
		return nil, errDigest
	}
	s.Vocab = make([][]byte, n)
	for i := range s.Vocab {
		if l := uv(); l > 0 {
			s.Vocab[i] = take(l)
		}
	}
	m := uv()
	if m > uint64(len(d)) {
		return nil, errDigest
	}
	for range m {
		id := uv()
		f := take(1)
		c := take(uv())
		if fail || id > 1<<31 {
			return nil, errDigest
		}
		s.Added = append(s.Added, AddedToken{ID: uint32(id), Content: string(c), Special: f[0]&flagSpecial != 0, Normalized: f[0]&flagNormalized != 0})
	}
	if fail || len(d) != 0 {
		return nil, errDigest
	}
	return s, nil
}
