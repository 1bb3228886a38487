// Command testreport reads `go test -json` on stdin and prints what plain `go test`
// prints (package results, the output of failing tests, build errors) followed by every
// skipped test with the reason it gave, so that a skip is never silent. scripts/test.sh
// pipes its test runs through it.
//
// With -skipped FILE it also writes the skipped tests there, one "package<TAB>test" a
// line (a subtest as "TestParent/sub"), for a second pass to run again: scripts/test.sh
// runs the tests that skip under -race once more without it.
//
// It never judges the run: go test's own exit status is the verdict (test.sh uses
// pipefail); testreport exits non-zero only if it cannot read or write.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// skip is a skipped test and why.
type skip struct {
	pkg, test, reason string
}

// report folds the events: test output is held until the test ends, printed only
// if it failed; package output is printed as it comes.
type report struct {
	out     io.Writer
	pending map[[2]string][]string // (package, test) → output so far
	skips   []skip
	passed  int
	failed  int
}

func newReport(out io.Writer) *report {
	return &report{out: out, pending: map[[2]string][]string{}}
}

func (r *report) add(e event) {
	key := [2]string{e.Package, e.Test}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
	case e.Test == "" && e.Action == "output":
		// The package's own lines: "ok", "FAIL", "?" and whatever the test binary
		// printed outside any test; "PASS" alone is noise, as plain go test drops it.
		if e.Output != "PASS\n" {
			fmt.Fprint(r.out, e.Output)
		}
	case e.Test == "":
	case e.Action == "output":
		r.pending[key] = append(r.pending[key], e.Output)
	case e.Action == "pass":
		r.passed++
		delete(r.pending, key)
	case e.Action == "fail":
		r.failed++
		fmt.Fprint(r.out, strings.Join(r.pending[key], ""))
		delete(r.pending, key)
	case e.Action == "skip":
		r.skips = append(r.skips, skip{e.Package, e.Test, reason(r.pending[key])})
		delete(r.pending, key)
	}
}

// reason is what a skipped test logged, without the framework's lines.
func reason(lines []string) string {
	var keep []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		keep = append(keep, t)
	}
	if len(keep) == 0 {
		return "(no reason given)"
	}
	return strings.Join(keep, " ")
}

// summary lists the skips and counts.
func (r *report) summary() {
	sort.Slice(r.skips, func(i, j int) bool {
		a, b := r.skips[i], r.skips[j]
		return a.pkg < b.pkg || a.pkg == b.pkg && a.test < b.test
	})
	fmt.Fprintf(r.out, "\ntests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, len(r.skips))
	for _, s := range r.skips {
		fmt.Fprintf(r.out, "  SKIP %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}

// writeSkipped writes the skipped tests, a line each.
func (r *report) writeSkipped(w io.Writer) error {
	for _, s := range r.skips {
		if _, err := fmt.Fprintf(w, "%s\t%s\n", s.pkg, s.test); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	skipped := flag.String("skipped", "", "write the skipped tests here (package<TAB>test a line)")
	flag.Parse()
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // not an event (go's own messages): as is
			continue
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r.summary()
	if *skipped != "" {
		f, err := os.Create(*skipped)
		if err == nil {
			err = r.writeSkipped(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
}
