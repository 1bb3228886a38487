package tracefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"switchyard.dev/pkg/trace"
)

// Files lists the trace files at path: the file itself, or every regular
// file in the directory (sorted, hidden files and READMEs skipped).
func Files(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(n, ".") || strings.HasPrefix(strings.ToUpper(n), "README") ||
			strings.HasSuffix(n, ".md") || strings.HasSuffix(n, ".tsv") {
			continue
		}
		out = append(out, filepath.Join(path, n))
	}
	slices.Sort(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("trace: no files in %s", path)
	}
	return out, nil
}

// ReadFile reads one file (plain or gzip) of format f; file namespaces its
// hash ids (trace.Read).
func ReadFile(path string, f trace.Format, file int, o trace.Options) (*trace.Workload, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return trace.Read(fh, f, file, filepath.Base(path), o)
}

// Load reads every file at path (a file or a directory) into one workload,
// decoding them in parallel (the Weka set is 460 MB of JSON). Weka and
// Mooncake files are workloads of their own, merged in file order, their
// hash ids namespaced by file. A request-trace recording's files (rolled,
// or one per process of its frontends) are one recording: their records
// are joined into one workload, as if one file held them all, so that a
// session written across files stays one session on one clock. What a
// reader passed over is in the workload's Warnings.
func Load(path string, f trace.Format, o trace.Options) (*trace.Workload, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	if f == trace.FormatDynamo {
		return loadRecording(path, files)
	}
	parts := make([]*trace.Workload, len(files))
	errs := make([]error, len(files))
	inParallel(len(files), func(i int) { parts[i], errs[i] = ReadFile(files[i], f, i+1, o) })
	all := &trace.Workload{Name: path}
	for i := range parts {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if err := all.Merge(parts[i]); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// loadRecording is Load of a request-trace recording. Its messages name
// each file once: one file given as path is the workload, which
// DynamoWorkload's messages name (its records' Origins name it so too); a
// directory's files are named after the directory, by their names in it.
// Warnings name a file by its name in its directory (labels).
func loadRecording(path string, files []string) (*trace.Workload, error) {
	names := labels(files)
	origins, one := names, len(files) == 1 && files[0] == path
	if one {
		origins = files
	}
	recs, warnings, i, err := records(files, names, origins)
	switch {
	case err != nil && one:
		return nil, fmt.Errorf("trace: dynamo %s: %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("trace: dynamo %s: %s: %w", path, names[i], err)
	}
	w, err := trace.DynamoWorkload(recs, path)
	if err != nil {
		return nil, err
	}
	w.Warnings = warnings
	return w, nil
}

// Records reads the records of a recording's files, in file order, and
// says per file what a killed writer cut off of it (trace.ReadRecords). A
// record another file holds too (a file copied into the recording's
// directory) is taken once, with a warning naming both files. A file is
// named, in its records' Origins, the warnings and an error, as labels
// names it.
func Records(files []string) (recs []trace.Record, warnings []string, err error) {
	names := labels(files)
	recs, warnings, i, err := records(files, names, names)
	if err != nil {
		return nil, nil, fmt.Errorf("trace: dynamo %s: %w", names[i], err)
	}
	return recs, warnings, nil
}

// labels names each of a recording's files for its messages: by its name
// in its directory (a recording is a directory's files, or one file), or,
// where another of the files has that name too, by its path as given.
func labels(files []string) []string {
	bases := make(map[string]int, len(files))
	for _, f := range files {
		bases[filepath.Base(f)]++
	}
	names := make([]string, len(files))
	for i, f := range files {
		if names[i] = filepath.Base(f); bases[names[i]] > 1 {
			names[i] = f
		}
	}
	return names
}

// records is Records, naming file i names[i] in the warnings and
// origins[i] in its records' Origins; an error is file bad's.
func records(files, names, origins []string) (recs []trace.Record, warnings []string, bad int, err error) {
	parts := make([][]trace.Record, len(files))
	cuts := make([]trace.Cut, len(files))
	errs := make([]error, len(files))
	inParallel(len(files), func(i int) { parts[i], cuts[i], errs[i] = readRecords(files[i], origins[i]) })
	total := 0
	for i := range files {
		if errs[i] != nil {
			return nil, nil, i, errs[i]
		}
		total += len(parts[i])
	}
	recs = make([]trace.Record, 0, total)
	seen := make(map[requestKey]int, total) // a request's record: the file it is in
	for i := range files {
		repeated, first := 0, -1
		for _, r := range parts[i] {
			if k, ok := keyOf(&r); ok {
				if j, dup := seen[k]; dup && j != i {
					repeated, first = repeated+1, j
					continue
				}
				seen[k] = i
			}
			recs = append(recs, r)
		}
		parts[i] = nil
		if cuts[i].Any() {
			warnings = append(warnings, names[i]+": "+cuts[i].String())
		}
		if repeated > 0 {
			what := fmt.Sprintf("%d request records", repeated)
			if repeated == 1 {
				what = "a request record"
			}
			warnings = append(warnings, fmt.Sprintf("%s: %s that %s holds too (a copy of it?), taken once",
				names[i], what, names[first]))
		}
	}
	return recs, warnings, 0, nil
}

// requestKey tells a request's record from every other request's: its
// tenant's session, its id and when it ended.
type requestKey struct {
	tenant, session, id string
	at                  uint64
}

func keyOf(r *trace.Record) (requestKey, bool) {
	if r.EventType != trace.EventRequestEnd || r.Request == nil || r.Request.RequestID == "" {
		return requestKey{}, false
	}
	k := requestKey{id: r.Request.RequestID, at: r.EventTimeUnixMs}
	if a := r.AgentContext; a != nil {
		k.tenant, k.session = a.Tenant, a.SessionID
	}
	return k, true
}

// readRecords reads one recorded file's records, their Origins naming it
// name; a gzip header cut off at the end (a process killed as it began
// the file) is a torn file of none.
func readRecords(path, name string) ([]trace.Record, trace.Cut, error) {
	fh, err := os.Open(path)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return nil, trace.Cut{}, fmt.Errorf("%s: %w", pe.Op, pe.Err) // the caller names the file
	}
	if err != nil {
		return nil, trace.Cut{}, err
	}
	defer fh.Close()
	r, err := trace.Decompress(fh)
	if trace.TornAtEnd(err) {
		return nil, trace.Cut{Torn: true}, nil
	}
	if err != nil {
		return nil, trace.Cut{}, err
	}
	return trace.ReadRecords(r, name)
}

// inParallel runs do(0) … do(n-1) on GOMAXPROCS goroutines.
func inParallel(n int, do func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := range next {
				do(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// Open is the trace.Opener of the file sinks: it creates the file at path
// readable by its owner only (its block hashes can confirm a guess of a
// prompt: docs/security.md), with fresh only if none is there
// (fs.ErrExist), else appending to it; a file whose last byte is no newline (its writer stopped in the
// middle of a line) gets one first, so that what is appended starts a line
// of its own instead of finishing that one. Only one process may append to
// a literal path: another's cut line would be finished by this one's.
func Open(path string, fresh bool) (io.WriteCloser, error) {
	if fresh {
		return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 && !endsALine(path, fi.Size()) {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// Writable reports why Open(path, fresh) would fail, leaving nothing: a
// directory at path, or its directory missing or refusing new files. A
// file to append to that is there already needs only to open for writing.
// Open runs at a writer's first flush, after its process started and
// looked well; a writer checks here to refuse to start instead.
func Writable(path string, fresh bool) error {
	if st, err := os.Stat(path); err == nil && !fresh {
		switch {
		case st.IsDir():
			return fmt.Errorf("%s is a directory", path)
		case !st.Mode().IsRegular():
			return nil // a device or a pipe (/dev/stdout): opened as it is
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".writable-*") // hidden: Files skips it
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return fmt.Errorf("directory %s: %w", dir, pe.Err) // not the probe's name
	}
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// endsALine reports whether the file of size bytes ends in a newline; one
// the writer may not read is taken as not (a blank line costs a reader
// nothing, a line finished by another's record costs it the file).
func endsALine(path string, size int64) bool {
	r, err := os.Open(path)
	if err != nil {
		return false
	}
	defer r.Close()
	last := make([]byte, 1)
	_, err = r.ReadAt(last, size-1)
	return err == nil && last[0] == '\n'
}

var _ trace.Opener = Open
