package trace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func seed(f *testing.F, name string) {
	if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
		f.Add(b)
	}
}

// check: whatever an importer accepts must be a valid workload, with times
// that did not overflow and counts within maxTokens.
func check(t *testing.T, w *Workload, err error) {
	if err != nil {
		return
	}
	if verr := w.Validate(); verr != nil {
		t.Fatalf("accepted an invalid workload: %v", verr)
	}
	if w.BlockSize > maxTokens {
		t.Fatalf("block size %d", w.BlockSize)
	}
	for _, s := range w.Sessions {
		if s.Start < 0 {
			t.Fatalf("session %q starts at %v", s.ID, s.Start)
		}
		for j, tn := range s.Turns {
			if tn.Gap < 0 || tn.InputLen > maxTokens || tn.OutputLen > maxTokens {
				t.Fatalf("session %q turn %d: gap %v input %d output %d", s.ID, j, tn.Gap, tn.InputLen, tn.OutputLen)
			}
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
		w, err := ReadDynamo(bytes.NewReader(b), "fuzz")
		check(t, w, err)
	})
}

// FuzzPerfetto: whatever ReadRecords accepts, WritePerfetto draws, as
// valid JSON, without panicking or failing.
func FuzzPerfetto(f *testing.F) {
	seed(f, "dynamo_small.jsonl")
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _, err := ReadRecords(bytes.NewReader(b), "fuzz")
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WritePerfetto(&out, recs, PerfettoOptions{}); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out.Bytes()) {
			t.Fatalf("invalid JSON: %s", out.Bytes())
		}
	})
}
