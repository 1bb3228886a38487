package trace

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
)

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
		return ReadDynamo(r, file, name)
	}
	return nil, fmt.Errorf("trace: unknown format %q", f)
}
