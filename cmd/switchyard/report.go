package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/template"

	"switchyard.dev/pkg/trace"
)

const reportUsage = `Usage: switchyard replay report --template T.md.tmpl --out results.md [--plot name=out.svg ...] name=run.json ...

Renders a Markdown report from replay --json files: each name=file pair is a
dataset the template refers to by name (text/template; the functions are
listed in cmd/switchyard/report.go). --plot draws a dataset's SVG. The same
files and template give the same bytes.
`

// reportCmd is `switchyard replay report`.
func reportCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay report", reportUsage, stderr)
	tmplPath := fs.String("template", "", "text/template of the report (required)")
	out := fs.String("out", "", "write the report here (default stdout)")
	var plots []string
	fs.Func("plot", "name=out.svg: draw dataset name's plot (repeatable)", func(v string) error {
		plots = append(plots, v)
		return nil
	})
	if err := parseFlagsAndArgs(fs, args); err != nil {
		return err
	}
	if *tmplPath == "" || fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	outs := [][2]string{{"--out", *out}}
	for _, p := range plots {
		_, path, _ := strings.Cut(p, "=")
		outs = append(outs, [2]string{"--plot", path})
	}
	if err := checkOutputs(outs...); err != nil {
		return err
	}
	data := map[string]runFile{}
	for _, a := range fs.Args() {
		name, path, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return fmt.Errorf("report: dataset %q is not name=file.json", a)
		}
		if _, dup := data[name]; dup {
			return fmt.Errorf("report: dataset %q is given twice", name)
		}
		rf, err := readRunFile(path)
		if err != nil {
			return err
		}
		data[name] = rf
	}
	src, err := os.ReadFile(*tmplPath)
	if err != nil {
		return err
	}
	r := &report{data: data}
	t, err := template.New(*tmplPath).Option("missingkey=error").Funcs(r.funcs()).Parse(string(src))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, nil); err != nil {
		return err
	}
	for _, p := range plots {
		name, path, ok := strings.Cut(p, "=")
		rf, known := data[name]
		if !ok || !known {
			return fmt.Errorf("report: --plot %q names no dataset", p)
		}
		title := fmt.Sprintf("%s (%s split) on %v × %v", recordedFormat(rf.Command).Describe(), rf.Config["split"], rf.Config["workers"], rf.Config["perf"])
		if err := os.WriteFile(path, plotSVG(title, rf.Rows), 0o644); err != nil {
			return err
		}
	}
	if *out == "" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	return os.WriteFile(*out, buf.Bytes(), 0o644)
}

// recordedFormat is the trace format a replay ran with, read from the
// command its file records (replay's default when the command names none).
func recordedFormat(command string) trace.Format {
	f := trace.FormatWeka
	args := strings.Fields(command)
	for i, a := range args {
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "format" || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			v = args[i+1]
		}
		if p, err := trace.ParseFormat(v); err == nil {
			f = p
		}
	}
	return f
}

type report struct{ data map[string]runFile }

func (r *report) funcs() template.FuncMap {
	return template.FuncMap{
		"row": r.row, "gain": r.gain, "verdict": r.verdict, "levels": r.levels, "table": r.table,
		"workingSets": r.workingSets, "best": r.best, "tuning": r.tuning,
		"tuneVsTest": r.tuneVsTest, "config": r.config,
		"oracleChecks": r.oracleChecks, "oracleExceptionsTied": r.oracleExceptionsTied,
		"aheadOf": r.aheadOf, "sameRows": r.sameRows, "maxGainGap": r.maxGainGap, "score": r.score,
		"gainPct": r.gainPct, "leaning": r.leaning, "notTiedWith": r.notTiedWith,
		"notAheadOf": r.notAheadOf, "goals": r.goals, "ablation": r.ablation, "verdictAcross": r.verdictAcross,
		"mul":    func(a, b float64) float64 { return a * b },
		"mul100": func(v float64) float64 { return 100 * v },
		"sub1":   func(n int) int { return n - 1 },
		"atoi":   strconv.Atoi,
		"minf":   func(a, b float64) float64 { return min(a, b) },
		"maxf":   func(a, b float64) float64 { return max(a, b) }, "windows": r.windows, "hitsAt": r.hitsAt,
		"belowIdeal": r.belowIdeal, "sameConfig": r.sameConfig, "tied": r.tied, "notTied": r.notTied,
		"list": func(xs ...string) []string { return xs },
		"join": strings.Join,
		"has": func(xs []string, x string) bool {
			for _, y := range xs {
				if y == x {
					return true
				}
			}
			return false
		},
		// require stops the report when a claim its text makes no longer
		// holds (a default that is not the tune split's best, say).
		"require": func(ok bool, msg string) (string, error) {
			if !ok {
				return "", errors.New("report: " + msg)
			}
			return "", nil
		},
		"f0":   func(v float64) string { return thousands(v) },
		"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
		"f2":   func(v float64) string { return fmt.Sprintf("%.2f", v) },
		"f3":   func(v float64) string { return fmt.Sprintf("%.3f", v) },
		"pct":  func(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) },
		"secs": secs,
		"mtok": func(v any) (string, error) {
			switch x := v.(type) {
			case float64:
				return fmt.Sprintf("%.2f", x/1e6), nil
			case int64:
				return fmt.Sprintf("%.2f", float64(x)/1e6), nil
			case int:
				return fmt.Sprintf("%.2f", float64(x)/1e6), nil
			}
			return "", fmt.Errorf("mtok: %v is not a number", v)
		},
		"div":   func(a, b float64) float64 { return a / b },
		"sub":   func(a, b float64) float64 { return a - b },
		"float": func(v int64) float64 { return float64(v) },
	}
}

// secs writes milliseconds as seconds with a precision that suits them.
func secs(msv float64) string {
	s := msv / 1e3
	switch {
	case s >= 100:
		return thousands(s)
	case s >= 1:
		return fmt.Sprintf("%.1f", s)
	}
	return fmt.Sprintf("%.2f", s)
}

// thousands writes a number rounded to an integer with thousands
// separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
