package trace

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// MemberError is a gzip stream that breaks before its end: a member that is
// corrupt, or was torn (its writer stopped while writing it) and had more
// written after it, as an older recorder restarted on the same file did.
// Nothing past it can be read. A member torn at the stream's very end is no
// MemberError: it is a Cut (Torn), the records before it read.
type MemberError struct {
	Member int   // the broken member, 1-based
	Offset int64 // the byte of the file it starts at
	More   bool  // the file goes on after where the member broke
	Err    error // what the decoder said
}

func (e *MemberError) Error() string {
	if e.More {
		return fmt.Sprintf("gzip member %d, at byte %d, breaks off mid-file: %v (torn by a writer stopped while writing it, "+
			"then written on after, or corrupt; nothing past it can be read)", e.Member, e.Offset, e.Err)
	}
	return fmt.Sprintf("gzip member %d, at byte %d, is corrupt: %v", e.Member, e.Offset, e.Err)
}

func (e *MemberError) Unwrap() error { return e.Err }

// gzipReader reads a gzip stream member by member, counting the bytes it
// takes, so that a member that breaks is named by its number and offset.
type gzipReader struct {
	in     countingReader
	zr     gzip.Reader
	member int   // the member being read, 1-based
	start  int64 // the byte it starts at
	err    error // the error the stream ended with, returned again
}

// newGzipReader reads the gzip stream of br, whose first member's header it
// reads now.
func newGzipReader(br *bufio.Reader) (*gzipReader, error) {
	g := &gzipReader{in: countingReader{r: br}, member: 1}
	if err := g.zr.Reset(&g.in); err != nil {
		return nil, err
	}
	g.zr.Multistream(false)
	return g, nil
}

func (g *gzipReader) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	for {
		n, err := g.zr.Read(p)
		if err == io.EOF {
			err = g.next()
		}
		if err != nil {
			g.err = g.explain(err)
			return n, g.err
		}
		if n > 0 || len(p) == 0 {
			return n, nil
		}
	}
}

// next starts the member after the one that just ended whole: io.EOF where
// none follows.
func (g *gzipReader) next() error {
	g.member, g.start = g.member+1, g.in.n
	if err := g.zr.Reset(&g.in); err != nil {
		return err
	}
	g.zr.Multistream(false)
	return nil
}

// explain says where the stream broke. A member (or header) the stream ends
// inside is io.ErrUnexpectedEOF as the decoder said it, a tear at the end;
// anything else is a MemberError.
func (g *gzipReader) explain(err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	_, peek := g.in.r.Peek(1)
	return &MemberError{Member: g.member, Offset: g.start, More: peek == nil, Err: err}
}

// finishMember reads the rest of the member being read, and says whether
// it broke (a MemberError) or not (nil). A line that is not JSON calls it:
// a member torn in the middle decodes the next member's bytes as its own
// and hands on garbage before the decoder notices, and then the member,
// not the line, is what to report.
func (g *gzipReader) finishMember() *MemberError {
	m := g.member
	var buf [4096]byte
	for g.member == m {
		if _, err := g.Read(buf[:]); err != nil {
			var me *MemberError
			if errors.As(err, &me) && me.Member == m {
				return me
			}
			return nil
		}
	}
	return nil
}

// countingReader counts the bytes read through it. It is a ByteReader, so
// that the gzip and flate decoders read from it directly, without a buffer
// of their own that would read ahead of the member they decode.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}
