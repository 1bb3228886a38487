package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
)

// Decompress returns a reader of r's content, gunzipping it (all members)
// when it starts with the gzip magic. A gzip stream that breaks before its
// end fails with a MemberError, which names the member and its offset; one
// that ends inside a member (a writer stopped while writing it) fails with
// io.ErrUnexpectedEOF, after the whole content before the tear (TornAtEnd
// tells one from the other).
func Decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(2)
	switch {
	case err == nil && magic[0] == 0x1f && magic[1] == 0x8b:
		g, err := newGzipReader(br)
		if err != nil {
			return nil, err
		}
		return g, nil
	case len(magic) == 1 && magic[0] == 0x1f:
		return nil, io.ErrUnexpectedEOF // a gzip header cut after its first byte
	}
	return br, nil
}

// maxLine bounds one JSONL line (a 1M-token prompt at 512 tokens per id is
// ~2k ids; Dynamo rows at 64 tokens per hash are ~16k hashes of 20 bytes).
const maxLine = 64 << 20

// lineScanner scans a JSONL stream whose lines may be up to maxLine long,
// counting lines so that a read error names the line it stopped at, and
// bytes, so that a bad line is known from the gzip member it came from
// (ReadRecords) rather than the one its read-ahead reached.
type lineScanner struct {
	sc   *bufio.Scanner
	line int
	end  int64 // the bytes of the stream scanned: where the last line ends
}

func newLineScanner(r io.Reader) *lineScanner {
	ls := &lineScanner{sc: bufio.NewScanner(r)}
	ls.sc.Buffer(make([]byte, 0, 64<<10), maxLine) // grown as a line needs
	ls.sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		n, line, err := bufio.ScanLines(data, atEOF)
		ls.end += int64(n)
		return n, line, err
	})
	return ls
}

// stopsShort reports JSON that stops inside a value, as a line does whose
// writer was stopped while writing it, rather than JSON gone wrong. A
// Decoder says io.ErrUnexpectedEOF of every such stop (json.Unmarshal names
// some of them, "tru" or "12.", after an imagined space, as a wrong
// character instead).
func stopsShort(b []byte) bool {
	var v json.RawMessage
	return errors.Is(json.NewDecoder(bytes.NewReader(b)).Decode(&v), io.ErrUnexpectedEOF)
}

// TornAtEnd reports whether err (Decompress's, or a read of what it
// returned) is a gzip stream that ends mid-member: its writer was stopped
// while writing it. A MemberError that says io.ErrUnexpectedEOF is a member
// torn mid-file, whose decoder ran on to the end: not a tear at the end.
func TornAtEnd(err error) bool {
	var me *MemberError
	return errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &me)
}

// torn reports a stream that ends mid-member (TornAtEnd).
func (sc *lineScanner) torn() bool { return TornAtEnd(sc.sc.Err()) }

// Cut is what of a recorded trace its writers cut short, each stopped while
// writing a record; the records around them are whole.
type Cut struct {
	Lines     int  // lines whose JSON stops short, dropped
	FirstLine int  // the first of them, 1-based
	Bytes     int  // theirs
	Torn      bool // the gzip stream ends mid-member
}

// Any reports whether anything was cut.
func (c Cut) Any() bool { return c.Lines > 0 || c.Torn }

// String says what was cut, for a warning.
func (c Cut) String() string {
	var parts []string
	if c.Torn {
		parts = append(parts, "the gzip stream ends mid-member")
	}
	switch c.Lines {
	case 0:
	case 1:
		parts = append(parts, fmt.Sprintf("line %d is cut off mid-record: dropped its %d bytes", c.FirstLine, c.Bytes))
	default:
		parts = append(parts, fmt.Sprintf("%d lines, the first line %d, are cut off mid-record: dropped their %d bytes", c.Lines, c.FirstLine, c.Bytes))
	}
	if len(parts) == 0 {
		return "nothing cut"
	}
	return strings.Join(parts, ", and ") + " (a writer stopped while writing)"
}

// nonBlank yields the lines of sc that are not blank, trimmed, with their
// 1-based line numbers; the caller checks sc.Err() after the loop.
func nonBlank(sc *lineScanner) iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		for sc.sc.Scan() {
			sc.line++
			if b := bytes.TrimSpace(sc.sc.Bytes()); len(b) > 0 && !yield(sc.line, b) {
				return
			}
		}
	}
}

// Err is the scanner's error with the line it failed on: a line past
// maxLine, a corrupt or truncated gzip stream.
func (sc *lineScanner) Err() error {
	err := sc.sc.Err()
	if errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("line %d: longer than %d MiB", sc.line+1, maxLine>>20)
	}
	if err != nil {
		return fmt.Errorf("line %d: %w", sc.line+1, err)
	}
	return nil
}

// Options tune the importers.
type Options struct {
	// BlockSize is the tokens per hash id for Mooncake formats (0 = 512).
	BlockSize int
}

// Read decodes one trace stream (plain or gzip) of the given format; file
// namespaces its hash ids and name (the file's name) labels errors.
// Listing and opening the files is the shell's (servicekit/tracefile).
func Read(r io.Reader, f Format, file int, name string, o Options) (*Workload, error) {
	r, err := Decompress(r)
	if err != nil {
		return nil, fmt.Errorf("trace: %s: %w", name, err)
	}
	switch f {
	case FormatWeka:
		return ReadWeka(r, file, name)
	case FormatMooncake:
		return ReadMooncake(r, file, name, o.BlockSize, false)
	case FormatAgenticMooncake:
		return ReadMooncake(r, file, name, o.BlockSize, true)
	case FormatDynamo:
		return ReadDynamo(r, name)
	}
	return nil, fmt.Errorf("trace: unknown format %q", f)
}
