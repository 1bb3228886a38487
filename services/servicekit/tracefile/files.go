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

// Append opens the file at path for appending, creating it (0644) when
// absent: the trace.Opener of the file sinks.
func Append(path string) (io.WriteCloser, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

var _ trace.Opener = Append
