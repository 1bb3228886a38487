package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"
)

// Sink writes records. Sinks are not safe for concurrent use: the shell
// that owns one serialises its calls (servicekit/tracefile.Async writes
// from one goroutine). now is when the record is written; file envelopes
// stamp it, the stream sink ignores it.
type Sink interface {
	Write(now time.Time, r *Record) error
	// Flush makes everything written so far durable (one complete gzip
	// member for gzip files).
	Flush() error
	Close() error
}

// Opener opens the file at path for writing, creating it: with fresh, only
// a file that does not exist yet (an error satisfying errors.Is(err,
// fs.ErrExist) otherwise), else appending to one that does, on a line of its
// own (a newline first when the file's last line was cut off). The trace
// package opens no file itself: the shell passes one
// (servicekit/tracefile.Open), a test an in-memory one.
type Opener func(path string, fresh bool) (io.WriteCloser, error)

// SinkConfig is the request-trace configuration (dynamo.md §2.1 names,
// with SWITCHYARD_REQUEST_TRACE_* or DYN_REQUEST_TRACE_* variables).
type SinkConfig struct {
	Enabled bool
	// Sinks: "file" and/or "stderr".
	Sinks []string
	// FilePath is the file for jsonl, the prefix for rolled or gzip files
	// (<prefix>.NNNNNN.jsonl[.gz]).
	FilePath string
	// FileFormat is "jsonl_gz" or "jsonl".
	FileFormat string
	// Capacity bounds the queue between requests and the writer; a full
	// queue drops records (counted) rather than block a request.
	Capacity      int
	FlushInterval time.Duration
	RollBytes     int64 // uncompressed bytes per file; 0 = never roll
	RollLines     int64 // lines per file; 0 = never roll
	// BufferBytes: a gzip member is cut once this much is buffered.
	BufferBytes int
}

// DefaultSinkConfig returns Dynamo's defaults (disabled).
func DefaultSinkConfig() SinkConfig {
	return SinkConfig{Sinks: []string{"file"}, FilePath: "/tmp/switchyard-request-trace", FileFormat: "jsonl_gz",
		Capacity: 1024, FlushInterval: time.Second, RollBytes: 256 << 20, BufferBytes: 1 << 20}
}

// SinkConfigFromEnv reads SWITCHYARD_REQUEST_TRACE* (falling back to the
// DYN_REQUEST_TRACE* names) through getenv.
func SinkConfigFromEnv(getenv func(string) string) (SinkConfig, error) {
	c := DefaultSinkConfig()
	get := func(suffix string) string {
		if v := getenv("SWITCHYARD_REQUEST_TRACE" + suffix); v != "" {
			return v
		}
		return getenv("DYN_REQUEST_TRACE" + suffix)
	}
	switch strings.ToLower(get("")) {
	case "", "0", "false", "no", "off":
	default:
		c.Enabled = true
	}
	if v := get("_SINKS"); v != "" {
		c.Sinks = nil
		for _, s := range strings.Split(v, ",") {
			switch s = strings.TrimSpace(s); s {
			case "file", "stderr":
				c.Sinks = append(c.Sinks, s)
			case "jsonl":
				c.Sinks, c.FileFormat = append(c.Sinks, "file"), "jsonl"
			case "jsonl_gz":
				c.Sinks, c.FileFormat = append(c.Sinks, "file"), "jsonl_gz"
			case "":
			default:
				return c, fmt.Errorf("trace: unsupported sink %q (file, stderr)", s)
			}
		}
	}
	if v := get("_FILE_PATH"); v != "" {
		c.FilePath = v
	}
	if v := get("_FILE_FORMAT"); v != "" {
		if v != "jsonl" && v != "jsonl_gz" {
			return c, fmt.Errorf("trace: file format %q (jsonl, jsonl_gz)", v)
		}
		c.FileFormat = v
	}
	for _, n := range []struct {
		suffix string
		dst    *int64
	}{{"_FILE_ROLL_BYTES", &c.RollBytes}, {"_FILE_ROLL_LINES", &c.RollLines}} {
		if v := get(n.suffix); v != "" {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || x < 0 {
				return c, fmt.Errorf("trace: %s=%q", n.suffix, v)
			}
			*n.dst = x
		}
	}
	if v := get("_CAPACITY"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x <= 0 {
			return c, fmt.Errorf("trace: capacity %q", v)
		}
		c.Capacity = x
	}
	if v := get("_FILE_FLUSH_INTERVAL_MS"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x <= 0 {
			return c, fmt.Errorf("trace: flush interval %q", v)
		}
		c.FlushInterval = time.Duration(x) * time.Millisecond
	}
	if v := get("_FILE_BUFFER_BYTES"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x <= 0 {
			return c, fmt.Errorf("trace: buffer bytes %q", v)
		}
		c.BufferBytes = x
	}
	return c, nil
}

// OpenSinks builds the configured sinks. File envelopes are stamped with
// the ms from start (when the writer started) to each Write's now; open
// opens the files.
func OpenSinks(c SinkConfig, stderr io.Writer, start time.Time, open Opener) (Sink, error) {
	var ms multiSink
	for _, s := range c.Sinks {
		switch s {
		case "stderr":
			ms = append(ms, NewStreamSink(stderr))
		case "file":
			ms = append(ms, NewFileSink(c, start, open))
		default:
			return nil, fmt.Errorf("trace: unsupported sink %q", s)
		}
	}
	if len(ms) == 1 {
		return ms[0], nil
	}
	return ms, nil
}

type multiSink []Sink

func (m multiSink) Write(now time.Time, r *Record) error {
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Write(now, r))
	}
	return errors.Join(errs...)
}
func (m multiSink) Flush() error {
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Flush())
	}
	return errors.Join(errs...)
}
func (m multiSink) Close() error {
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// StreamSink writes bare records, one JSON per line (the stderr sink).
type StreamSink struct {
	w    *bufio.Writer
	enc  *json.Encoder
	held int // records written since the last flush
}

// NewStreamSink writes to w.
func NewStreamSink(w io.Writer) *StreamSink {
	bw := bufio.NewWriter(w)
	return &StreamSink{w: bw, enc: json.NewEncoder(bw)}
}

// Write and Flush fail with a LostError of the records since the last
// flush: a write that fails its buffer takes them with it (and the buffer
// stays failed).
func (s *StreamSink) Write(_ time.Time, r *Record) error {
	s.held++
	return s.lost(s.enc.Encode(r))
}

func (s *StreamSink) Flush() error {
	if err := s.w.Flush(); err != nil {
		return s.lost(err)
	}
	s.held = 0
	return nil
}

func (s *StreamSink) lost(err error) error {
	if err == nil {
		return nil
	}
	lost := &LostError{Records: s.held, Err: err}
	s.held = 0
	return lost
}

func (s *StreamSink) Close() error { return s.Flush() }

// FileSink writes envelopes to rolling JSONL or gzip JSONL files. Gzip
// files are sequences of members, one per flush; a process stopped while
// writing one leaves it torn, which a reader takes as the file's end
// (ReadRecords), so a numbered file is never written again: a new sink
// starts at the first number no file has. A plain file at a literal path
// (no rolling) is appended to, on a line of its own. It decides what goes
// in which file and when to roll; open does the opening.
type FileSink struct {
	cfg    SinkConfig
	open   Opener
	start  time.Time
	gz     bool
	seq    int
	f      io.WriteCloser
	buf    []byte
	held   int          // records in buf
	member bytes.Buffer // a gzip member being built
	bytes  int64        // uncompressed bytes in the current file
	lines  int64
}

// NewFileSink stamps envelopes with the ms since start and opens files
// through open lazily, at the first flush.
func NewFileSink(c SinkConfig, start time.Time, open Opener) *FileSink {
	return &FileSink{cfg: c, open: open, start: start, gz: c.FileFormat != "jsonl"}
}

// Path returns the path of file number n.
func (s *FileSink) Path(n int) string {
	if !s.gz && s.cfg.RollBytes == 0 && s.cfg.RollLines == 0 {
		return s.cfg.FilePath // jsonl without rolling: the literal path
	}
	ext := ".jsonl"
	if s.gz {
		ext = ".jsonl.gz"
	}
	return fmt.Sprintf("%s.%06d%s", s.cfg.FilePath, n, ext)
}

func (s *FileSink) Write(now time.Time, r *Record) error {
	env := Envelope{Timestamp: uint64(max(now.Sub(s.start).Milliseconds(), 0)), Event: r}
	b, err := json.Marshal(&env)
	if err != nil {
		return err
	}
	s.buf = append(append(s.buf, b...), '\n')
	s.held++
	s.lines++
	s.bytes += int64(len(b) + 1)
	roll := (s.cfg.RollBytes > 0 && s.bytes >= s.cfg.RollBytes) || (s.cfg.RollLines > 0 && s.lines >= s.cfg.RollLines)
	if roll || len(s.buf) >= max(s.cfg.BufferBytes, 1) {
		if err := s.Flush(); err != nil {
			return err
		}
	}
	if roll {
		err := s.closeFile()
		s.seq++
		s.bytes, s.lines = 0, 0
		return err
	}
	return nil
}

func (s *FileSink) Flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	if s.f == nil {
		err := errors.New("trace: file sink without an Opener")
		var f io.WriteCloser
		if s.open != nil {
			f, err = s.openFile()
		}
		if err != nil {
			// The records are dropped, as a full queue drops them, rather
			// than held in memory until the path opens.
			return s.drop(err)
		}
		s.f = f
	}
	out := s.buf
	if s.gz {
		// The member whole, then one write: a process killed mid-flush
		// leaves at most that write's part of it.
		s.member.Reset()
		zw := gzip.NewWriter(&s.member)
		zw.Write(s.buf) // a bytes.Buffer takes everything
		zw.Close()
		out = s.member.Bytes()
	}
	n, err := s.f.Write(out)
	if err == nil {
		s.buf, s.held = s.buf[:0], 0
		return nil
	}
	if n > 0 {
		// What the write left of a member or a line would have the next
		// flush's follow it and spoil the file for a reader: the file is
		// given up, and the next flush opens another (a numbered file's
		// next number, counted from empty; the literal path again, its cut
		// line ended first). A write that wrote nothing (a full disk)
		// spoiled nothing: the file stays, rather than a new one a flush.
		s.closeFile()
		if s.Path(s.seq) != s.cfg.FilePath {
			s.seq++
			s.bytes, s.lines = 0, 0
		}
	}
	return s.drop(err)
}

// drop empties the buffer after err, which dropped what it held (a write
// that wrote part of it left that part torn: lost too).
func (s *FileSink) drop(err error) error {
	lost := &LostError{Records: s.held, Err: err}
	s.buf, s.held = s.buf[:0], 0
	return lost
}

// LostError is a sink's failure that dropped records it held.
type LostError struct {
	Records int
	Err     error
}

func (e *LostError) Error() string { return fmt.Sprintf("%v (%d records dropped)", e.Err, e.Records) }
func (e *LostError) Unwrap() error { return e.Err }

// Lost is how many records err says a sink dropped with it (LostError); 0
// when it says none.
func Lost(err error) int {
	var le *LostError
	if errors.As(err, &le) {
		return le.Records
	}
	return 0
}

// openFile opens the sink's next file: a numbered one that does not exist
// yet, the first from s.seq on (an earlier process's may end torn), or the
// literal path to append to.
func (s *FileSink) openFile() (io.WriteCloser, error) {
	numbered := s.Path(s.seq) != s.cfg.FilePath
	for tries := 0; ; tries++ {
		f, err := s.open(s.Path(s.seq), numbered)
		if !numbered || !errors.Is(err, fs.ErrExist) || tries == maxTakenFiles {
			return f, err
		}
		s.seq++
	}
}

// maxTakenFiles bounds how many existing numbered files a new sink steps
// over looking for a free number; past it the open fails, and the records
// are dropped as for any failed open.
const maxTakenFiles = 100_000

func (s *FileSink) closeFile() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

func (s *FileSink) Close() error {
	return errors.Join(s.Flush(), s.closeFile())
}
