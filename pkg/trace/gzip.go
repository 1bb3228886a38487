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
// MemberError: it is a Cut (Torn), the records before it read. (The two
// are told apart by the member header after the tear, which a member torn
// mid-file has its decoder take in as its own data: countingReader.)
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
	in        countingReader
	zr        gzip.Reader
	member    int   // the member being read, 1-based
	start     int64 // the byte it starts at
	out       int64 // the bytes of content read, all members'
	memberOut int64 // where in them the member's begin
	err       error // the error the stream ended with, returned again
}

// newGzipReader reads the gzip stream of br, whose first member's header it
// reads now: one that breaks is the first member's MemberError, or
// io.ErrUnexpectedEOF where the stream ends in it (explain).
func newGzipReader(br *bufio.Reader) (*gzipReader, error) {
	g := &gzipReader{in: countingReader{r: br, from: 1}, member: 1}
	if err := g.zr.Reset(&g.in); err != nil {
		return nil, g.explain(err)
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
		g.out += int64(n)
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
	g.member, g.start, g.memberOut = g.member+1, g.in.n, g.out
	g.in.from, g.in.seen = g.start+1, false
	if err := g.zr.Reset(&g.in); err != nil {
		return err
	}
	g.zr.Multistream(false)
	return nil
}

// explain says where the stream broke. A stream that ends inside a member
// (or its header) is a tear at the end, io.ErrUnexpectedEOF as the decoder
// said it, unless the member's decoder took another member's header as
// its own data on the way: then the member was torn mid-file, and its
// decoder ran on through the members after it. That, and anything else,
// is a MemberError.
func (g *gzipReader) explain(err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) && !g.in.seen {
		return err
	}
	_, peek := g.in.r.Peek(1)
	return &MemberError{Member: g.member, Offset: g.start, More: peek == nil || g.in.seen, Err: err}
}

// finishBudget bounds what finishMember decodes: a member torn mid-file
// decodes the next members' bytes into garbage for some kilobytes (rarely
// a hundred) before its decoder notices, while a whole member may be a
// whole file's worth.
const finishBudget = 1 << 20

// finishMember reads on through the member being read, at most budget
// bytes of it (finishBudget), and says whether it broke (a MemberError) or
// not (nil: it ended whole, or did not end within the budget and holds no
// other member's header). ReadRecords calls it of a line that is not JSON
// and holds some of the member: a member torn in the middle decodes the
// next member's bytes as its own and hands on garbage before the decoder
// notices, and then the member, not the line, is what to report. One
// whose decoder has taken in another member's header is torn so, whether
// or not the decoder noticed within the budget.
func (g *gzipReader) finishMember(budget int) *MemberError {
	m := g.member
	var buf [4096]byte
	for left := budget; g.member == m; {
		if left == 0 {
			if g.in.seen {
				return &MemberError{Member: m, Offset: g.start, More: true,
					Err: fmt.Errorf("its data runs on into a member header, at byte %d", g.in.at)}
			}
			return nil
		}
		n, err := g.Read(buf[:min(len(buf), left)])
		if err != nil {
			var me *MemberError
			if errors.As(err, &me) && me.Member == m {
				return me
			}
			return nil
		}
		left -= n
	}
	return nil
}

// countingReader counts the bytes read through it. It is a ByteReader, so
// that the gzip and flate decoders read from it directly, without a buffer
// of their own that would read ahead of the member they decode.
//
// It also watches for a gzip member header (header) in the bytes the
// decoder takes as the current member's: a member torn mid-file has its
// decoder run on into the next member, header and all, where it may run
// out of input (io.ErrUnexpectedEOF) as a member torn at the end does.
type countingReader struct {
	r    *bufio.Reader
	n    int64
	last uint64 // the last 8 bytes read, the latest lowest
	prev uint16 // the 2 bytes before them
	from int64  // a header starting here or later is not the current member's own
	seen bool   // one was read,
	at   int64  // starting here (the first)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for _, b := range p[:n] { // headers, trailers and stored blocks: rare
		c.n++
		c.see(b)
	}
	return n, err
}

// ReadByte is the decoder's read of every byte of a member's data, see
// written out: the compiler would not inline it.
func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
		c.prev = c.prev<<8 | uint16(c.last>>56)
		c.last = c.last<<8 | uint64(b)
		if c.prev == 0x1f8b {
			c.checkHeader()
		}
	}
	return b, err
}

// see slides the 10-byte window on by b, the byte at c.n-1: the magic is
// checked first, its two bytes one compare, and the rest only after it
// (checkHeader).
func (c *countingReader) see(b byte) {
	c.prev = c.prev<<8 | uint16(c.last>>56)
	c.last = c.last<<8 | uint64(b)
	if c.prev == 0x1f8b {
		c.checkHeader()
	}
}

// checkHeader notes a member header in the window, where it is not the
// current member's own.
func (c *countingReader) checkHeader() {
	if header(c.last) && c.n-10 >= c.from && !c.seen {
		c.seen, c.at = true, c.n-10
	}
}

// header reports whether the 8 bytes after a gzip magic (1f 8b) are the
// rest of a member header: compression method 8 (deflate), a flags byte
// with its reserved bits clear, any mtime, the extra flags a writer sets
// (0, 2 for the best compression, 4 for the fastest), and an OS byte
// below 32 (RFC 1952's 0-13, zlib's 19 for macOS) or 255 (unknown).
// Compressed data holds such 10 bytes by chance once in about 9·10^10
// bytes, so a member torn at the end is taken for one torn mid-file about
// once per 90 GB of its compressed data: very rarely, a recorder's members
// being a megabyte of JSON at most. (JSON, its control bytes escaped, puts
// none in a stored block.)
func header(rest uint64) bool {
	cm, flg := byte(rest>>56), byte(rest>>48)
	xfl, os := byte(rest>>8), byte(rest)
	return cm == 8 && flg&0xe0 == 0 && (xfl == 0 || xfl == 2 || xfl == 4) && (os < 0x20 || os == 0xff)
}
