package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A recorded trace whose frontend was killed mid-record is drawn without
// the record it cut, with a warning that says what was dropped; a line
// gone wrong in the middle of a file is still refused, naming the file and
// the line.
func TestTracePerfettoDropsACutRecord(t *testing.T) {
	dir := t.TempDir()
	whole, err := os.ReadFile(filepath.Join("..", "..", "pkg", "trace", "testdata", "dynamo_small.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	last := bytes.LastIndexByte(whole[:len(whole)-1], '\n') + 1
	cutAt := last + 30 // 30 bytes of the last line written, no newline
	cut := filepath.Join(dir, "cut.jsonl")
	if err := os.WriteFile(cut, whole[:cutAt], 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"trace", "perfetto", cut, "-o", filepath.Join(dir, "p.json")}, &stdout, &stderr); err != nil {
		t.Fatalf("trace perfetto of a file whose last line is cut off: %v", err)
	}
	if want := "warning: cut.jsonl: line 4 is cut off mid-record: dropped its 30 bytes"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want it to say %q", stderr.String(), want)
	}
	if want := "wrote 3 records"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want it to say %q (the 3 whole records)", stderr.String(), want)
	}

	// Replay and loadgen read it the same way, and say so.
	stderr.Reset()
	if err := run(context.Background(), []string{"replay", "--trace", cut, "--format", "dynamo", "--warmup", "0s", "--window", "1m", "--policies", "kv", "--quiet"}, &stdout, &stderr); err != nil {
		t.Fatalf("replay of a file whose last line is cut off: %v", err)
	}
	if want := "warning: " + filepath.Base(cut) + ": line 4 is cut off mid-record: dropped its 30 bytes"; !strings.Contains(stderr.String(), want) {
		t.Errorf("replay's stderr %q, want it to say %q", stderr.String(), want)
	}

	middle := filepath.Join(dir, "middle.jsonl")
	if err := os.WriteFile(middle, append(append(whole[:last:last], "x"+string(whole[last+1:])+"\n"...), whole...), 0o644); err != nil {
		t.Fatal(err)
	}
	err = runErr("trace", "perfetto", middle, "-o", filepath.Join(dir, "p.json"))
	if want := "middle.jsonl: line 4: "; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("trace perfetto of a file with a line gone wrong in the middle: %v, want an error saying %q", err, want)
	}
}
