package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// smallTrace is the small Weka trace the end-to-end tests replay.
var smallTrace = filepath.Join("..", "..", "pkg", "trace", "testdata", "weka_small.json")

// mustRun runs the command line and returns its stdout; an error fails the
// test, with its stderr.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("switchyard %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// replaySmall is mustRun of a quick replay of smallTrace: two small workers,
// two seeds, levels 1 and 2, a minute's warmup and then window; flags add to
// these.
func replaySmall(t *testing.T, window string, flags ...string) string {
	t.Helper()
	return mustRun(t, append([]string{"replay", "--trace", smallTrace, "--format", "weka", "--concurrency", "1,2", "--workers", "2",
		"--block-size", "16", "--gpu-blocks", "256", "--seeds", "2", "--warmup", "1m", "--window", window}, flags...)...)
}
