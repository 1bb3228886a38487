package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func seed(f *testing.F, name string) {
	if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
		f.Add(b)
	}
}

// check: whatever an importer accepts must be a valid workload.
func check(t *testing.T, w *Workload, err error) {
	if err == nil {
		if verr := w.Validate(); verr != nil {
			t.Fatalf("accepted an invalid workload: %v", verr)
		}
	}
}

func FuzzReadWeka(f *testing.F) {
	seed(f, "weka_small.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ReadWeka(bytes.NewReader(b), 1, "fuzz")
		check(t, w, err)
	})
}

func FuzzReadMooncake(f *testing.F) {
	seed(f, "mooncake_small.jsonl")
	seed(f, "mooncake_sessions.jsonl")
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ReadMooncake(bytes.NewReader(b), 1, "fuzz", 0, false)
		check(t, w, err)
	})
}

func FuzzReadAgenticMooncake(f *testing.F) {
	seed(f, "agentic_mooncake.jsonl")
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ReadMooncake(bytes.NewReader(b), 1, "fuzz", 0, true)
		check(t, w, err)
	})
}

func FuzzReadDynamo(f *testing.F) {
	seed(f, "dynamo_small.jsonl")
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ReadDynamo(bytes.NewReader(b), 1, "fuzz")
		check(t, w, err)
	})
}
