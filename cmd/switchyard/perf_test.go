package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated parts of docs/")

// docs/simulator.md's table of published checks is exactly what
// `switchyard perf check --markdown` prints.
func TestSimulatorDocHasThePerfChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every published load on the simulated engine")
	}
	path := filepath.Join("..", "..", "docs", "simulator.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const open, closing = "<!-- perf check -->\n", "<!-- /perf check -->"
	i, j := bytes.Index(doc, []byte(open)), bytes.Index(doc, []byte(closing))
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q … %q block", path, strings.TrimSpace(open), closing)
	}
	var want bytes.Buffer
	if err := perfCheck(&want, true); err != nil {
		t.Fatal(err)
	}
	got := doc[i+len(open) : j]
	if bytes.Equal(got, want.Bytes()) {
		return
	}
	if *updateDocs {
		out := append(append(append([]byte{}, doc[:i+len(open)]...), want.Bytes()...), doc[j:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's published checks differ from `switchyard perf check --markdown` (go test ./cmd/switchyard -run SimulatorDoc -update-docs):\n%s", path, want.String())
}
