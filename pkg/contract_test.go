package pkg_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// forbiddenImports are the packages through which a core would reach files,
// sockets or the network. A shell opens them and hands the core an
// io.Reader, an io.Writer, bytes or a small func (doc.go).
var forbiddenImports = []string{"os", "net", "syscall", "io/ioutil"}

// forbidden: p is one of forbiddenImports or below one (os/exec, net/http).
func forbidden(p string) bool {
	for _, f := range forbiddenImports {
		if p == f || strings.HasPrefix(p, f+"/") {
			return true
		}
	}
	return false
}

// forbiddenTime are the functions of package time that read the wall clock
// or wait on it. Cores take time as a now argument instead (doc.go).
var forbiddenTime = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTicker", "NewTimer"}

// allowed lists the directories (relative to pkg/, not their
// subdirectories) whose non-test files may break the contract, each with
// the reason. Keep it short: a new entry is a
// decision, not a convenience.
var allowed = map[string]string{
	// Developer commands (package main, run by hand with go run) that turn a
	// Hugging Face tokenizer.json into the digest the tokenizer embeds, and
	// write the inputs of its differential test. No core imports them; they
	// live beside the package whose data they make.
	"tokenizer/cmd/tokdigest":   "go run tool: reads tokenizer.json, writes the embedded digest",
	"tokenizer/internal/refgen": "go run tool: writes the differential test's inputs",
}

// TestCoresArePure fails when a non-test Go file under pkg/ imports os, net
// or net/http, reads or waits on the wall clock through package time, or
// contains a go statement: the contract of the cores (doc.go). It parses
// every file whatever its build constraints.
func TestCoresArePure(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// What the go tool ignores, and test data.
			if path != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		if _, ok := allowed[filepath.ToSlash(filepath.Dir(path))]; ok { // that directory only, not below it
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, v := range violations(fset, f) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range allowed { // an entry outlives its reason only by mistake
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Errorf("allow-list entry %s: no such directory", dir)
		}
	}
	if files < 100 { // the walk must have seen the cores, not an empty tree
		t.Fatalf("checked only %d files", files)
	}
}

// violations lists what in f breaks the contract, with positions.
func violations(fset *token.FileSet, f *ast.File) []string {
	var out []string
	at := func(n ast.Node) string { return fset.Position(n.Pos()).String() }
	timeName := "" // what package time is called in f
	for _, is := range f.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		if forbidden(p) {
			out = append(out, at(is)+": imports "+strconv.Quote(p))
		}
		if p == "time" {
			switch {
			case is.Name == nil:
				timeName = "time"
			case is.Name.Name == ".":
				out = append(out, at(is)+": dot-imports \"time\" (its clock would not show)")
			default:
				timeName = is.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, at(n)+": go statement")
		case *ast.SelectorExpr:
			// A call or a reference (now = time.Now) alike.
			if x, ok := n.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && slices.Contains(forbiddenTime, n.Sel.Name) {
				out = append(out, at(n)+": uses time."+n.Sel.Name)
			}
		}
		return true
	})
	return out
}

// TestContractCatches keeps the checker honest: each rule finds its
// violation in a small source, and a clean core passes.
func TestContractCatches(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"clean", `package p
import "time"
func f(now time.Time) time.Time { return now.Add(time.Second) }`, 0},
		{"os", `package p
import "os"
var _ = os.Args`, 1},
		{"net and http", `package p
import ("net"; "net/http")
var _ net.Conn
var _ http.Handler`, 2},
		{"now and since", `package p
import "time"
func f() time.Duration { return time.Since(time.Now()) }`, 2},
		{"clock as a value", `package p
import "time"
var clock = time.Now`, 1},
		{"renamed time", `package p
import stdtime "time"
func f() { stdtime.Sleep(1) }`, 1},
		{"dot time", `package p
import . "time"
var _ Duration`, 1},
		{"go statement", `package p
func f() { go func() {}() }`, 1},
		{"method named Now", `package p
type clock struct{}
func (clock) Now() int { return 0 }
var time clock
var _ = time.Now()`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", tc.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if got := violations(fset, f); len(got) != tc.want {
				t.Errorf("%d violations, want %d: %q", len(got), tc.want, got)
			}
		})
	}
}
