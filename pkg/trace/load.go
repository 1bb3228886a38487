package trace

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// Decompress returns a reader of r's content, gunzipping it (all members)
// when it starts with the gzip magic.
func Decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		return gzip.NewReader(br)
	}
	return br, nil
}

// Options tune the importers.
type Options struct {
	// BlockSize is the tokens per hash id for Mooncake formats (0 = 512).
	BlockSize int
}

// Read decodes one trace stream (plain or gzip) of the given format; file
// namespaces its hash ids.
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
		return ReadDynamo(r, file, name)
	}
	return nil, fmt.Errorf("trace: unknown format %q", f)
}

// ReadFile reads one file.
func ReadFile(path string, f Format, file int, o Options) (*Workload, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return Read(fh, f, file, filepath.Base(path), o)
}

// Load reads every file at path (a file or a directory) into one workload,
// in file order.
func Load(path string, f Format, o Options) (*Workload, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	all := &Workload{Name: filepath.Base(path)}
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
