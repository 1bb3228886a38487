package tracefile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
// in file order.
func Load(path string, f trace.Format, o trace.Options) (*trace.Workload, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	all := &trace.Workload{Name: filepath.Base(path)}
	for i, p := range files {
		w, err := ReadFile(p, f, i+1, o)
		if err != nil {
			return nil, err
		}
		if err := all.Merge(w); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// Open is the trace.Opener of the file sinks: it creates the file at path
// (0644), with fresh only if none is there (fs.ErrExist), else appending to
// it; a file whose last byte is no newline (its writer stopped in the
// middle of a line) gets one first, so that what is appended starts a line
// of its own instead of finishing that one.
func Open(path string, fresh bool) (io.WriteCloser, error) {
	if fresh {
		return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			_, err = f.Write([]byte{'\n'})
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

var _ trace.Opener = Open
