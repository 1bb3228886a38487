package trace

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Sink writes records. Sinks are not safe for concurrent use: Async
// serialises them.
type Sink interface {
	Write(r *Record) error
	// Flush makes everything written so far durable (one complete gzip
	// member for gzip files).
	Flush() error
	Close() error
}

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

// OpenSinks builds the configured sinks; now is the clock of the file
// envelopes' timestamps (ms since the writer started).
func OpenSinks(c SinkConfig, stderr io.Writer, now func() time.Time) (Sink, error) {
	var ms multiSink
	for _, s := range c.Sinks {
		switch s {
		case "stderr":
			ms = append(ms, NewStreamSink(stderr))
		case "file":
			ms = append(ms, NewFileSink(c, now))
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

func (m multiSink) Write(r *Record) error {
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Write(r))
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
	w   *bufio.Writer
	enc *json.Encoder
}

// NewStreamSink writes to w.
func NewStreamSink(w io.Writer) *StreamSink {
	bw := bufio.NewWriter(w)
	return &StreamSink{w: bw, enc: json.NewEncoder(bw)}
}

func (s *StreamSink) Write(r *Record) error { return s.enc.Encode(r) }
func (s *StreamSink) Flush() error          { return s.w.Flush() }
func (s *StreamSink) Close() error          { return s.w.Flush() }

// FileSink writes envelopes to rolling JSONL or gzip JSONL files. Gzip
// files are sequences of complete members, one per flush, so a reader
// (or a crash) never sees a torn member.
type FileSink struct {
	cfg   SinkConfig
	now   func() time.Time
	start time.Time
	gz    bool
	seq   int
	f     *os.File
	buf   []byte
	bytes int64 // uncompressed bytes in the current file
	lines int64
}

// NewFileSink opens files lazily, at the first flush.
func NewFileSink(c SinkConfig, now func() time.Time) *FileSink {
	if now == nil {
		now = time.Now
	}
	return &FileSink{cfg: c, now: now, start: now(), gz: c.FileFormat != "jsonl"}
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

func (s *FileSink) Write(r *Record) error {
	env := Envelope{Timestamp: uint64(max(s.now().Sub(s.start).Milliseconds(), 0)), Event: r}
	b, err := json.Marshal(&env)
	if err != nil {
		return err
	}
	s.buf = append(append(s.buf, b...), '\n')
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
		f, err := os.OpenFile(s.Path(s.seq), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		s.f = f
	}
	var err error
	if s.gz {
		zw := gzip.NewWriter(s.f)
		if _, err = zw.Write(s.buf); err == nil {
			err = zw.Close()
		}
	} else {
		_, err = s.f.Write(s.buf)
	}
	s.buf = s.buf[:0]
	return err
}

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

// Async puts a bounded, lossy queue in front of a sink: Emit never blocks
// (a full queue drops the record and counts it), and Run, in a goroutine
// the owner starts, writes and flushes.
type Async struct {
	sink    Sink
	ch      chan *Record
	dropped atomic.Uint64
	written atomic.Uint64
	errs    atomic.Uint64
}

// NewAsync wraps sink with a queue of capacity records (0 = 1024).
func NewAsync(sink Sink, capacity int) *Async {
	if capacity <= 0 {
		capacity = 1024
	}
	return &Async{sink: sink, ch: make(chan *Record, capacity)}
}

// Emit queues a record; it reports false when the record was dropped.
func (a *Async) Emit(r *Record) bool {
	select {
	case a.ch <- r:
		return true
	default:
		a.dropped.Add(1)
		return false
	}
}

// Dropped, Written and Errors are counters for metrics.
func (a *Async) Dropped() uint64 { return a.dropped.Load() }
func (a *Async) Written() uint64 { return a.written.Load() }
func (a *Async) Errors() uint64  { return a.errs.Load() }

// Run writes queued records until ctx is done, flushing on every tick;
// then it drains what is queued, flushes and closes the sink.
func (a *Async) Run(ctx context.Context, tick <-chan time.Time) error {
	for {
		select {
		case r := <-a.ch:
			a.write(r)
		case <-tick:
			if a.sink.Flush() != nil {
				a.errs.Add(1)
			}
		case <-ctx.Done():
			for {
				select {
				case r := <-a.ch:
					a.write(r)
				default:
					return a.sink.Close()
				}
			}
		}
	}
}

func (a *Async) write(r *Record) {
	if err := a.sink.Write(r); err != nil {
		a.errs.Add(1)
		return
	}
	a.written.Add(1)
}
