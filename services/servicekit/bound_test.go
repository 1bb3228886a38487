package servicekit

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// A bounded flag refuses, when parsed, what its rule rejects, of any
// number or duration type, and its help still names its type and says
// what it takes.
func TestBoundRefusesWhatItsRuleRejects(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("svc", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Int("blocks", 8, "blocks kept")
		fs.Duration("tick", time.Second, "tick interval")
		fs.Float64("share", 0.5, "share of the cache")
		fs.Int64("bytes", 1, "bytes")
		fs.Uint64("hashes", 1, "hashes")
		Bound(fs, "blocks", "> 0", func(v float64) bool { return v > 0 })
		Bound(fs, "tick", "> 0", func(v float64) bool { return v > 0 })
		Bound(fs, "share", "0..1", func(v float64) bool { return v >= 0 && v <= 1 })
		Bound(fs, "bytes", "> 0", func(v float64) bool { return v > 0 })
		Bound(fs, "hashes", "> 0", func(v float64) bool { return v > 0 })
		return fs
	}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--blocks", "1", "--tick", "1ms", "--share", "0"}, true},
		{[]string{"--share", "1"}, true},
		{[]string{"--bytes", "5", "--hashes", "5"}, true},
		{[]string{"--bytes", "-5"}, false},
		{[]string{"--hashes", "0"}, false},
		{[]string{"--blocks", "0"}, false},
		{[]string{"--blocks", "-3"}, false},
		{[]string{"--tick", "-1s"}, false},
		{[]string{"--share", "1.5"}, false},
		{[]string{"--share", "NaN"}, false},
		{[]string{"--blocks", "x"}, false},
	} {
		err := newFS().Parse(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("%v: %v, want ok %t", tc.args, err, tc.ok)
		}
	}
	if err := newFS().Parse([]string{"--share", "2"}); err == nil || !strings.Contains(err.Error(), "want 0..1") {
		t.Errorf("--share 2: %v, want it to say what the flag takes", err)
	}
	var help strings.Builder
	fs := newFS()
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, want := range []string{"-blocks int", "blocks kept (int > 0) (default 8)", "-tick duration", "-share float"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
}

// A bounded flag whose default is zero prints no default, as a plain flag
// does; any other default is printed.
func TestBoundKeepsZeroDefaultsUnprinted(t *testing.T) {
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	fs.Int("cap", 0, "cap")
	fs.Duration("wait", 0, "wait")
	fs.Float64("rate", 0, "rate")
	fs.Duration("tick", time.Second, "tick")
	for _, name := range []string{"cap", "wait", "rate", "tick"} {
		Bound(fs, name, "≥ 0", func(v float64) bool { return v >= 0 })
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if n := strings.Count(help.String(), "(default"); n != 1 || !strings.Contains(help.String(), "(default 1s)") {
		t.Errorf("want only tick's default printed:\n%s", help.String())
	}
}
