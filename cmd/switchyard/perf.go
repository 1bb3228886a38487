package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"switchyard.dev/pkg/enginesim"
)

const perfUsage = `Usage: switchyard perf <check|show> [flags]

  check   run every published measurement the presets are checked against on
          the simulated engine and print the published figure, the model's and
          their ratio (--markdown: the table of docs/simulator.md)
  show    print a preset's KV capacity and step times over a grid of prefill
          (new tokens × prefix) and decode (batch × context) shapes
`

// perfCmd is `switchyard perf`.
func perfCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, perfUsage)
		return errUsage
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, perfUsage)
		return nil
	}
	fs := newFlagSet("perf "+args[0], perfUsage, stderr)
	switch args[0] {
	case "check":
		markdown := fs.Bool("markdown", false, "print a Markdown table")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		return perfCheck(stdout, *markdown)
	case "show":
		name := fs.String("perf", enginesim.DefaultPreset, "a preset's name (the mocker's polynomials have no model or GPU to show)")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		p, err := enginesim.LookupPreset(*name)
		if err != nil {
			return err
		}
		perfShow(stdout, p)
		return nil
	}
	fmt.Fprintf(stderr, "switchyard perf: unknown subcommand %q\n\n", args[0])
	fmt.Fprint(stderr, perfUsage)
	return errUsage
}

func perfCheck(w io.Writer, markdown bool) error {
	type row struct {
		p     enginesim.Published
		model float64
	}
	var rows []row
	for _, p := range enginesim.PublishedChecks() {
		v, err := p.Model()
		if err != nil {
			return err
		}
		rows = append(rows, row{p, v})
	}
	use := func(p enginesim.Published) string {
		if p.Fit {
			return "fit"
		}
		return "check"
	}
	load := func(b enginesim.ServeBench) string {
		return fmt.Sprintf("%d×(%d in, %d out) at concurrency %d", b.NumPrompts, b.InputLen, b.OutputLen, b.MaxConcurrency)
	}
	if markdown {
		// Sources once, numbered; the table refers to them.
		var sources []string
		num := map[string]int{}
		for _, r := range rows {
			if _, ok := num[r.p.Source]; !ok {
				sources = append(sources, r.p.Source)
				num[r.p.Source] = len(sources)
			}
		}
		for i, src := range sources {
			fmt.Fprintf(w, "%d. %s\n", i+1, src)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| preset | source | setup | load | metric | published | model | model / published | use |")
		fmt.Fprintln(w, "|---|---:|---|---|---|---:|---:|---:|---|")
		for _, r := range rows {
			fmt.Fprintf(w, "| %s | [%d] | %s | %s | %s | %.2f | %.2f | %.2f | %s |\n", r.p.Preset, num[r.p.Source], r.p.Setup,
				load(r.p.Load), r.p.Metric, r.p.Value, r.model, r.model/r.p.Value, use(r.p))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "preset\tload\tmetric\tpublished\tmodel\tratio\tuse\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%s\t\n", r.p.Preset, load(r.p.Load), r.p.Metric, r.p.Value, r.model, r.model/r.p.Value, use(r.p))
	}
	return tw.Flush()
}

func perfShow(w io.Writer, p enginesim.Preset) {
	r := p.Roofline
	fmt.Fprintf(w, "%s: %s on %d × %s\n", p.Name, r.Model.Name, r.TP, r.GPU.Name)
	fmt.Fprintf(w, "weights %.1f GiB per GPU, KV %d bytes per token, KV capacity %d tokens per worker, max model length %d\n",
		r.WeightBytesPerGPU()/(1<<30), r.Model.BytesPerToken(), r.KVCapacityTokens(), r.Model.MaxModelLen)
	news := []int{512, 2048, 8192}
	prefixes := []int{0, 8192, 32768, 131072}
	fmt.Fprintf(w, "\nprefill step, ms (rows: new tokens; columns: prefix tokens)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\t%s\t\n", joinInts(prefixes))
	for _, n := range news {
		var cells []string
		for _, pre := range prefixes {
			cells = append(cells, msString(r.StepTime(&enginesim.Batch{Prefill: []enginesim.PrefillChunk{{NewTokens: n, PrefixTokens: pre}}})))
		}
		fmt.Fprintf(tw, "%d\t%s\t\n", n, strings.Join(cells, "\t"))
	}
	tw.Flush()
	batches := []int{1, 8, 32, 128}
	contexts := []int{1024, 8192, 32768, 131072}
	fmt.Fprintf(w, "\ndecode step, ms (rows: batch; columns: context tokens per sequence)\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\t%s\t\n", joinInts(contexts))
	for _, b := range batches {
		var cells []string
		for _, c := range contexts {
			cells = append(cells, msString(r.StepTime(&enginesim.Batch{DecodeRequests: b, DecodeContextTokens: b * c})))
		}
		fmt.Fprintf(tw, "%d\t%s\t\n", b, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, "\t")
}

func msString(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }
