package tracefile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"switchyard.dev/pkg/trace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAsyncDropsInsteadOfBlocking(t *testing.T) {
	var buf bytes.Buffer
	a := NewAsync(trace.NewStreamSink(&buf), 2, nil)
	r := &trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd}
	if !a.Emit(r) || !a.Emit(r) || a.Emit(r) {
		t.Fatal("queue of 2 should take two and drop the third")
	}
	if a.Dropped() != 1 {
		t.Fatalf("dropped %d", a.Dropped())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx, nil) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.Written() != 2 || strings.Count(buf.String(), "\n") != 2 {
		t.Errorf("written %d, output %q", a.Written(), buf.String())
	}
}

// The whole write path on real files: the configured sinks opened with
// Open, fed by Async, rolled by the core, read back with Load.
func TestSinksWriteFilesThatLoadReads(t *testing.T) {
	dir := t.TempDir()
	c := trace.DefaultSinkConfig()
	c.FilePath = filepath.Join(dir, "trace")
	c.RollLines = 2
	sink, err := trace.OpenSinks(c, nil, time.Now(), Open)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAsync(sink, 8, nil)
	for i := range 3 {
		rec := &trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd, EventTimeUnixMs: uint64(1000 * (i + 1)),
			AgentContext: &trace.AgentContext{SessionID: "s"},
			Request: &trace.RequestMetrics{RequestID: string(rune('a' + i)), InputTokens: trace.U64(64), OutputTokens: trace.U64(1),
				Replay: &trace.Replay{TraceBlockSize: 64, InputLength: 64, InputSequenceHashes: []uint64{uint64(i + 1)}}}}
		if !a.Emit(rec) {
			t.Fatal("dropped")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if a.Written() != 3 || a.Errors() != 0 {
		t.Fatalf("written %d, errors %d", a.Written(), a.Errors())
	}
	files, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "trace.000000.jsonl.gz"), filepath.Join(dir, "trace.000001.jsonl.gz")}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Fatalf("files: %s", diff)
	}
	w, err := Load(dir, trace.FormatDynamo, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The rolled files are one recording: the session's turns in both make
	// one session.
	if st := w.Stats(); st.Sessions != 1 || st.Turns != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.jsonl", "a.jsonl.gz", ".hidden", "README", "notes.md", "index.tsv"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(dir, "a.jsonl.gz"), filepath.Join(dir, "b.jsonl")}, got); diff != "" {
		t.Error(diff)
	}
	one := filepath.Join(dir, "README")
	if got, err := Files(one); err != nil || len(got) != 1 || got[0] != one {
		t.Errorf("a file names itself: %v %v", got, err)
	}
	if _, err := Files(filepath.Join(dir, "sub")); err == nil {
		t.Error("an empty directory listed")
	}
	if _, err := Files(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing path listed")
	}
}

// A frontend killed while writing its trace, then started again: its
// records before the tear and the new process's both read back, with the
// tear warned of. Gzip: the new process writes a file of its own, since
// nothing can follow a torn member. A plain file at a literal path: the new
// process appends on a line of its own, after the cut one.
func TestARestartedWriterAfterATear(t *testing.T) {
	rec := func(id string, at uint64) *trace.Record {
		return &trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd, EventTimeUnixMs: at,
			AgentContext: &trace.AgentContext{SessionID: id},
			Request: &trace.RequestMetrics{RequestID: id, InputTokens: trace.U64(64), OutputTokens: trace.U64(1),
				Replay: &trace.Replay{TraceBlockSize: 64, InputLength: 64, InputSequenceHashes: []uint64{at}}}}
	}
	for _, format := range []string{"jsonl_gz", "jsonl"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			c := trace.DefaultSinkConfig()
			c.FileFormat = format
			c.FilePath = filepath.Join(dir, "trace")
			if format == "jsonl" {
				c.FilePath += ".jsonl"
			}
			first := trace.NewFileSink(c, time.Now(), Open)
			for i, id := range []string{"a", "b"} {
				if err := first.Write(time.Now(), rec(id, uint64(1000*(i+1)))); err != nil {
					t.Fatal(err)
				}
				if err := first.Flush(); err != nil { // a member, or a line, each
					t.Fatal(err)
				}
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			files, err := Files(dir)
			if err != nil || len(files) != 1 {
				t.Fatalf("files %v, %v", files, err)
			}
			// Killed in the middle of its last write.
			fi, err := os.Stat(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(files[0], fi.Size()-40); err != nil {
				t.Fatal(err)
			}
			second := trace.NewFileSink(c, time.Now(), Open)
			if err := second.Write(time.Now(), rec("c", 3000)); err != nil {
				t.Fatal(err)
			}
			if err := second.Close(); err != nil {
				t.Fatal(err)
			}
			w, err := Load(dir, trace.FormatDynamo, trace.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, s := range w.Sessions {
				ids = append(ids, s.ID)
			}
			if !slices.Equal(ids, []string{"a", "c"}) || len(w.Warnings) != 1 {
				t.Errorf("sessions %q, warnings %q; want a and c, and the tear warned of", ids, w.Warnings)
			}
		})
	}
}

// A recording's files (one per process of a restarted or replicated
// frontend) are one workload: a session written across two files is one
// session on one clock, and a file a killed process left empty or with
// its gzip header cut off takes nothing from the others.
func TestARecordingAcrossFilesIsOneWorkload(t *testing.T) {
	dir := t.TempDir()
	c := trace.DefaultSinkConfig()
	c.FilePath = filepath.Join(dir, "trace")
	for _, at := range []uint64{1_000, 3_601_000} { // an hour apart, each its own process
		sink := trace.NewFileSink(c, time.Now(), Open)
		rec := &trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd, EventTimeUnixMs: at,
			AgentContext: &trace.AgentContext{SessionID: "s"},
			Request: &trace.RequestMetrics{RequestID: "r", InputTokens: trace.U64(64), OutputTokens: trace.U64(1), TotalTimeMs: trace.F64(500),
				Replay: &trace.Replay{TraceBlockSize: 64, InputLength: 64, InputSequenceHashes: []uint64{1}}}}
		if err := sink.Write(time.Now(), rec); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{"trace.000002.jsonl.gz": "", "trace.000003.jsonl.gz": "\x1f\x8b\x08\x00", "trace.000004.jsonl.gz": "\x1f"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := Load(dir, trace.FormatDynamo, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Sessions) != 1 || len(w.Sessions[0].Turns) != 2 {
		t.Fatalf("%d sessions (%+v), want one of two turns", len(w.Sessions), w.Sessions)
	}
	if gap := w.Sessions[0].Turns[1].Gap; gap < 59*time.Minute {
		t.Errorf("the second turn's gap %v, want about an hour", gap)
	}
	if len(w.Warnings) != 2 || !strings.Contains(w.Warnings[0], "trace.000003.jsonl.gz: the gzip stream ends mid-member") ||
		!strings.Contains(w.Warnings[1], "trace.000004.jsonl.gz: the gzip stream ends mid-member") {
		t.Errorf("warnings %q, want the cut headers named", w.Warnings)
	}

	// A file copied into the recording's directory is taken once.
	b, err := os.ReadFile(filepath.Join(dir, "trace.000000.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "trace.000000.jsonl.gz.bak"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err = Load(dir, trace.FormatDynamo, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Sessions) != 1 || len(w.Sessions[0].Turns) != 2 {
		t.Errorf("with a copy: %d sessions, the first of %d turns; want one of two", len(w.Sessions), len(w.Sessions[0].Turns))
	}
	if !slices.ContainsFunc(w.Warnings, func(m string) bool {
		return strings.Contains(m, "trace.000000.jsonl.gz.bak: a request record that trace.000000.jsonl.gz holds too")
	}) {
		t.Errorf("warnings %q, want the copy named", w.Warnings)
	}
}

// Each message names a file once, and so that it is told from every other:
// one file as given, as the workload; a directory's files by their names
// in it, after the directory; files of several directories (Records) by
// their names, or their paths as given where their names are alike.
func TestMessagesNameEachFileOnce(t *testing.T) {
	row := func(id string, bs int) string {
		return fmt.Sprintf(`{"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 1000, `+
			`"agent_context": {"session_id": %q}, "request": {"request_id": %q, "input_tokens": 64, "output_tokens": 1, `+
			`"replay": {"trace_block_size": %d, "input_length": 64, "input_sequence_hashes": [1]}}}`, id, id, bs)
	}
	write := func(path string, lines ...string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	one := filepath.Join(root, "one", "t.jsonl")
	write(one, row("a", 64), row("b", 2<<30)) // line 2: a block size past the limit
	bad := filepath.Join(root, "bad", "t.jsonl")
	write(bad, row("a", 64), "{not json}")
	dir := filepath.Join(root, "dir")
	write(filepath.Join(dir, "a.jsonl"), row("a", 64))
	write(filepath.Join(dir, "b.jsonl"), row("b", 64), row("c", 2<<30))
	write(filepath.Join(root, "dir2", "a.jsonl"), row("a", 64))
	write(filepath.Join(root, "dir2", "b.jsonl"), row("b", 64), "{not json}")
	copied := filepath.Join(root, "copy", "a.jsonl")
	write(copied, row("a", 64))

	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"one file's record", loadErr(one), "trace: dynamo " + one + `: line 2: request "b": trace_block_size`},
		{"one file's line", loadErr(bad), "trace: dynamo " + bad + ": line 2: invalid character"},
		{"a directory's file's record", loadErr(dir), "trace: dynamo " + dir + `: b.jsonl:2: request "c": trace_block_size`},
		{"a directory's file's line", loadErr(filepath.Join(root, "dir2")), "trace: dynamo " + filepath.Join(root, "dir2") + ": b.jsonl: line 2: invalid character"},
		{"a file of several directories' line", recordsErr(one, bad), "trace: dynamo " + bad + ": line 2: invalid character"},
		{"a missing file of several", recordsErr(one, filepath.Join(root, "absent", "t.jsonl")),
			"trace: dynamo " + filepath.Join(root, "absent", "t.jsonl") + ": open: "},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) || strings.Count(tc.err.Error(), ".jsonl") > 1 {
			t.Errorf("%s: %v; want it to start %q, naming the file once", tc.what, tc.err, tc.want)
		}
	}

	// A copy in another directory, of the same name.
	recs, warnings, err := Records([]string{filepath.Join(root, "dir", "a.jsonl"), copied})
	if err != nil || len(recs) != 1 || recs[0].Origin.File != filepath.Join(root, "dir", "a.jsonl") {
		t.Fatalf("%d records (%+v), %v", len(recs), recs, err)
	}
	if want := copied + ": a request record that " + filepath.Join(dir, "a.jsonl") + " holds too"; len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
		t.Errorf("warnings %q, want one starting %q", warnings, want)
	}
}

func loadErr(path string) error {
	_, err := Load(path, trace.FormatDynamo, trace.Options{})
	return err
}

func recordsErr(files ...string) error {
	_, _, err := Records(files)
	return err
}

// A sink that cannot write loses what it held: Async counts those records
// and the failures, and logs a run of failures once, at WARN, and the
// first write after it once, at INFO.
func TestAsyncReportsAFailingSinkOncePerRun(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	open := func(path string, fresh bool) (io.WriteCloser, error) {
		if broken.Load() {
			return nil, errors.New("disk on fire")
		}
		f, err := Open(path, fresh)
		return &breakable{f, &broken}, err
	}
	c := trace.DefaultSinkConfig()
	c.FilePath, c.FileFormat = filepath.Join(t.TempDir(), "trace.jsonl"), "jsonl"
	c.RollBytes = 0
	var logs bytes.Buffer
	a := NewAsync(trace.NewFileSink(c, time.Now(), open), 8, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan error)
	go func() { done <- a.Run(ctx, tick) }()
	written := uint64(0)
	// round emits n records, waits for the sink to take them, and flushes.
	round := func(n int) {
		for range n {
			a.Emit(&trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd})
		}
		written += uint64(n)
		for deadline := time.Now().Add(10 * time.Second); a.Written() != written; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("written %d, want %d", a.Written(), written)
			}
		}
		tick <- time.Now()
		tick <- time.Now() // taken once the first tick's flush is done
	}
	check := func(errs, lost uint64, warns, infos int) {
		t.Helper()
		if a.Errors() != errs || a.Lost() != lost || strings.Count(logs.String(), "level=WARN") != warns || strings.Count(logs.String(), "level=INFO") != infos {
			t.Fatalf("errors %d, lost %d (want %d, %d); logs:\n%s", a.Errors(), a.Lost(), errs, lost, logs.String())
		}
	}
	round(2) // the file does not open
	check(1, 2, 1, 0)
	round(1)
	check(2, 3, 1, 0)
	broken.Store(false)
	round(1)
	check(2, 3, 1, 1)
	if !strings.Contains(logs.String(), "records_lost=3") {
		t.Errorf("the recovery does not say what was lost: %s", logs.String())
	}
	broken.Store(true) // now the open file's writes fail
	round(2)
	check(3, 5, 2, 1)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// What a failure loses is what the sink held, as the sink counts it: not
// the records it had written itself since the last tick (a full buffer
// flushes within Write). A tick with nothing to write after a failure is
// no recovery.
func TestAsyncCountsOnlyWhatTheSinkDropped(t *testing.T) {
	var broken atomic.Bool
	c := trace.DefaultSinkConfig()
	c.FilePath, c.FileFormat = filepath.Join(t.TempDir(), "trace.jsonl"), "jsonl"
	c.RollBytes, c.BufferBytes = 0, 1 // every record flushed as it is written
	open := func(path string, fresh bool) (io.WriteCloser, error) {
		f, err := Open(path, fresh)
		return &breakable{f, &broken}, err
	}
	var logs bytes.Buffer
	a := NewAsync(trace.NewFileSink(c, time.Now(), open), 8, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan error)
	go func() { done <- a.Run(ctx, tick) }()
	emit := func(n int, taken func() uint64, want uint64) {
		for range n {
			a.Emit(&trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd})
		}
		for deadline := time.Now().Add(10 * time.Second); taken() != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("taken %d, want %d", taken(), want)
			}
		}
	}
	emit(2, a.Written, 2)
	broken.Store(true)
	emit(1, a.Errors, 1)
	tick <- time.Now()
	tick <- time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.Lost() != 1 || a.Errors() != 1 || strings.Contains(logs.String(), "written again") {
		t.Fatalf("lost %d, errors %d (want 1, 1, no recovery); logs:\n%s", a.Lost(), a.Errors(), logs.String())
	}
	if b, err := os.ReadFile(c.FilePath); err != nil || bytes.Count(b, []byte("\n")) != 2 {
		t.Fatalf("file: %q, %v; want the two records written before the failure", b, err)
	}
}

// breakable is a file whose writes fail, writing nothing, while broken.
type breakable struct {
	io.WriteCloser
	broken *atomic.Bool
}

func (b *breakable) Write(p []byte) (int, error) {
	if b.broken.Load() {
		return 0, errors.New("no space left on device")
	}
	return b.WriteCloser.Write(p)
}

func TestWritable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "trace.jsonl")
	if err := os.WriteFile(file, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path  string
		fresh bool
		ok    bool
	}{
		{filepath.Join(dir, "new.jsonl"), false, true},
		{filepath.Join(dir, "trace.000000.jsonl.gz"), true, true},
		{file, false, true},
		{file, true, true}, // taken: the sink steps to the next number, in the same directory
		{filepath.Join(dir, "absent", "trace.jsonl"), false, false},
		{filepath.Join(file, "trace.jsonl"), false, false}, // its directory a file
		{dir, false, false},
	} {
		if err := Writable(tt.path, tt.fresh); (err == nil) != tt.ok {
			t.Errorf("Writable(%s, %v) = %v", tt.path, tt.fresh, err)
		}
	}
	if files, _ := os.ReadDir(dir); len(files) != 1 {
		t.Errorf("Writable left files behind: %v", files)
	}
}

// A trace file is its owner's alone, whatever the umask lets: its block
// hashes can confirm a guess of a prompt (docs/security.md).
func TestTraceFilesAreTheOwnersAlone(t *testing.T) {
	dir := t.TempDir()
	for _, fresh := range []bool{true, false} {
		path := filepath.Join(dir, fmt.Sprint("t-", fresh, ".jsonl"))
		w, err := Open(path, fresh)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("fresh=%v: mode %v, want no access for group or others", fresh, perm)
		}
	}
}
