package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"switchyard.dev/pkg/trace"
	"switchyard.dev/services/servicekit/tracefile"
)

const traceUsage = `Usage: switchyard trace perfetto <file|dir> -o out.json [--no-stages] [--no-tools]

Converts request traces (dynamo.request.trace.v1 JSONL or gzip JSONL: what
SWITCHYARD_REQUEST_TRACE=1 writes, Dynamo's, or replay --trace-out) into Chrome
Trace Event JSON for ui.perfetto.dev: a process per session, a lane per
sub-agent, request slices with prefill-wait / prefill / decode stages, and the
tool gaps between turns. A record cut off by its writer's being killed (a
line whose JSON stops short, a gzip member that breaks off) is dropped, with
a warning.
`

// traceCmd is `switchyard trace <subcommand>`.
func traceCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "perfetto" {
		switch {
		case len(args) > 0 && isHelp(args[0]):
			fmt.Fprint(stdout, traceUsage)
			return nil
		case len(args) > 0:
			fmt.Fprintf(stderr, "switchyard trace: unknown subcommand %q\n\n", args[0])
		}
		fmt.Fprint(stderr, traceUsage)
		return errUsage
	}
	fs := newFlagSet("trace perfetto", traceUsage, stderr)
	out := fs.String("o", "", "output file (default stdout)")
	noStages := fs.Bool("no-stages", false, "omit prefill-wait / prefill / decode stage slices")
	noTools := fs.Bool("no-tools", false, "omit tool gaps")
	// Accept the input before or after the flags.
	rest := args[1:]
	var in string
	if len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
		in, rest = rest[0], rest[1:]
	}
	if err := parseFlagsAndArgs(fs, rest); err != nil {
		return err
	}
	if in == "" && fs.NArg() > 0 {
		in = fs.Arg(0)
		if err := noMoreArgs(fs, 1); err != nil {
			return err
		}
	} else if err := noMoreArgs(fs, 0); err != nil {
		return err
	}
	if in == "" {
		fs.Usage()
		return errUsage
	}
	files, err := tracefile.Files(in)
	if err != nil {
		return err
	}
	recs, warnings, err := tracefile.Records(files)
	if err != nil {
		return err
	}
	for _, m := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", m)
	}
	if !slices.ContainsFunc(recs, trace.Drawn) {
		return fmt.Errorf("%s: no request_end or tool record (want dynamo.request.trace.v1 JSONL, as replay --trace-out writes)", in)
	}
	w := stdout
	if *out != "" {
		fh, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer fh.Close()
		w = fh
	}
	if err := trace.WritePerfetto(w, recs, trace.PerfettoOptions{NoStages: *noStages, NoTools: *noTools}); err != nil {
		return err
	}
	if *out != "" {
		fmt.Fprintf(stderr, "wrote %d records to %s (open it in ui.perfetto.dev)\n", len(recs), *out)
	}
	return nil
}
