package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/replay"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/trace"
)

const replayUsage = `Usage: switchyard replay --trace <file|dir> --format <dynamo|mooncake|agentic-mooncake|weka> [flags]

Replays a trace on a simulated cluster (discrete events on virtual time, the
real routing, indexing, admission and engine cores, no RPC): one run per
(policy, concurrency). Prints a table; --json and --plot write the rows and an
SVG of throughput and prefix hit rate vs concurrency per policy.

Flags:
`

// replayCmd is `switchyard replay`.
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, replayUsage); fs.PrintDefaults() }
	d := replay.DefaultConfig()
	tracePath := fs.String("trace", "", "trace file or directory (required)")
	format := fs.String("format", "weka", "trace format: dynamo, mooncake, agentic-mooncake, weka")
	traceBlock := fs.Int("trace-block-size", 0, "tokens per hash id for Mooncake formats (0 = 512)")
	policies := fs.String("policies", "round_robin,kv,kv_affinity,session_aware", "comma-separated routing policies")
	conc := fs.String("concurrency", "32,64,128,256,512", "comma-separated concurrency levels (sessions active at once)")
	workers := fs.Int("workers", d.Workers, "simulated workers")
	blockSize := fs.Int("block-size", d.Engine.BlockSize, "engine KV block size in tokens")
	gpuBlocks := fs.Int("gpu-blocks", d.Engine.NumGPUBlocks, "device KV blocks per worker")
	hostBlocks := fs.Int("host-blocks", 0, "host (CPU) KV blocks per worker; 0 = no host tier")
	diskBlocks := fs.Int("disk-blocks", 0, "disk KV blocks per worker; 0 = no disk tier")
	poolBlocks := fs.Int("pool-blocks", 0, "shared KV pool (Mooncake-like) capacity in blocks for the whole cluster; 0 = no pool")
	poolTP := fs.Int("pool-tp", 1, "tensor-parallel ranks per page in the shared pool (objects per page = 2 × this)")
	poolBW := fs.Float64("pool-bandwidth", enginesim.DefaultConfig().PoolTransferBandwidth/1e9, "shared pool → GPU bandwidth per worker in GB/s")
	hintsOn := fs.Bool("hints", false, "run the KV hint policies (the kvhint emitter's) against the simulated engines")
	hintsDisabled := fs.String("hints-disabled", strings.Join(hints.DefaultConfig().Disabled, ","), "with --hints: comma-separated policies that never fire (\"\" = all on); policies: "+strings.Join(hints.PolicyNames(), ", "))
	maxSeqs := fs.Int("max-num-seqs", 0, "max running requests per worker (0 = engine default)")
	batched := fs.Int("max-batched-tokens", 0, "max tokens per step (0 = engine default)")
	speedUp := fs.Float64("speedup", 1, "engine speed-up factor (2 = twice as fast as the perf model)")
	perfTable := fs.String("perf", "", "engine step times: a preset, mocker or a JSON table file; empty = the default preset")
	maxGap := fs.Duration("max-gap", 0, "cap every tool gap (0 = as in the trace)")
	sessions := fs.Int("sessions", 0, "replay only the first n top-level sessions (0 = all)")
	seed := fs.Int64("seed", d.Seed, "random seed")
	ad := admission.DefaultConfig()
	fs.Float64Var(&ad.PauseThreshold, "pause-threshold", ad.PauseThreshold, "session_aware: pause programs on a worker above this fraction of its KV capacity")
	fs.Float64Var(&ad.PauseTarget, "pause-target", ad.PauseTarget, "session_aware: pausing sheds down to this fraction")
	fs.Float64Var(&ad.SoftDemoteThreshold, "soft-demote-threshold", ad.SoftDemoteThreshold, "session_aware: soft-demote band start")
	fs.Float64Var(&ad.ResumeHysteresis, "resume-hysteresis", ad.ResumeHysteresis, "session_aware: resume packs up to threshold minus this")
	fs.Float64Var(&ad.ActingTokenWeight, "acting-token-weight", ad.ActingTokenWeight, "session_aware: weight of ACTING programs' tokens when pausing (ThunderAgent: 1)")
	fs.DurationVar(&ad.ActingDecayTau, "acting-decay-tau", ad.ActingDecayTau, "session_aware: half-life of ACTING programs' tokens when resuming")
	fs.DurationVar(&ad.TickInterval, "tick", ad.TickInterval, "session_aware: admission tick interval")
	fs.DurationVar(&ad.IdleTTL, "idle-ttl", ad.IdleTTL, "session_aware: release ACTING programs idle this long (0 = never)")
	fs.DurationVar(&ad.ResumeTimeout, "resume-timeout", ad.ResumeTimeout, "session_aware: force-resume programs paused this long")
	fs.BoolVar(&ad.ResumeOnLastWorker, "resume-on-last-worker", ad.ResumeOnLastWorker, "session_aware: resume a paused program on its last worker when it has room (KV locality) instead of the roomiest; false = ThunderAgent")
	fs.BoolVar(&ad.ResumeOversized, "resume-oversized", ad.ResumeOversized, "session_aware: resume a program larger than a worker's pause target once a worker has that much room (false = ThunderAgent: wait for --resume-timeout)")
	fs.IntVar(&ad.CapacityTiers, "admission-tiers", ad.CapacityTiers, "session_aware: tiers counted as a worker's KV capacity, from the device down (1 = device, 2 = +host, 0 = all: ThunderAgent)")
	policyLabel := fs.String("label", "", "name the rows' policy this (to tell tuned variants apart in --merge)")
	jsonOut := fs.String("json", "", "write the result rows as JSON here")
	plotOut := fs.String("plot", "", "write an SVG plot here")
	traceOut := fs.String("trace-out", "", "write the simulated requests of the last run as request_end JSONL here (for `switchyard trace perfetto`)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	steady := fs.Bool("steady-only", false, "end each run with its steady state (the first session no queued one replaces): every metric over that window, and much faster at high concurrency")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the runs here")
	merge := fs.String("merge", "", "comma-separated JSON files of earlier runs: print, plot and write their rows together instead of simulating")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if *merge != "" {
		return mergeRuns(splitList(*merge), *jsonOut, *plotOut, stdout)
	}
	if *tracePath == "" {
		fmt.Fprintln(stderr, "switchyard replay: --trace is required")
		fs.Usage()
		return errUsage
	}
	f, err := trace.ParseFormat(*format)
	if err != nil {
		return err
	}
	var pols []routing.Policy
	for _, p := range splitList(*policies) {
		pol, err := routing.ParsePolicy(p)
		if err != nil {
			return err
		}
		pols = append(pols, pol)
	}
	var levels []int
	for _, c := range splitList(*conc) {
		n, err := strconv.Atoi(c)
		if err != nil || n <= 0 {
			return fmt.Errorf("bad concurrency %q", c)
		}
		levels = append(levels, n)
	}
	if len(pols) == 0 || len(levels) == 0 {
		return fmt.Errorf("need at least one policy and one concurrency level")
	}

	t0 := time.Now()
	w, err := loadWorkload(*tracePath, f, trace.Options{BlockSize: *traceBlock})
	if err != nil {
		return err
	}
	st := w.Stats()
	fmt.Fprintf(stderr, "loaded %s: %d sessions (%d top-level), %d turns, %.2fG prompt tokens, in %.1fs\n",
		*tracePath, st.Sessions, st.TopLevel, st.Turns, float64(st.InputTokens)/1e9, time.Since(t0).Seconds())

	cfg := d
	cfg.Workers = *workers
	cfg.Engine.BlockSize = *blockSize
	cfg.Engine.NumGPUBlocks = *gpuBlocks
	cfg.Engine.HostBlocks = *hostBlocks
	cfg.Engine.DiskBlocks = *diskBlocks
	cfg.Engine.PoolTransferBandwidth = *poolBW * 1e9
	cfg.SharedPool = replay.PoolConfig{Pages: *poolBlocks}
	cfg.SharedPool.Layout.TPSize = *poolTP
	if *hintsOn {
		hc := hints.DefaultConfig()
		hc.Disabled = splitList(*hintsDisabled)
		if err := hints.ParsePolicies(hc.Disabled); err != nil {
			return err
		}
		cfg.Hints = &hc
	}
	cfg.Engine.MaxNumSeqs = *maxSeqs
	cfg.Engine.MaxNumBatchedTokens = *batched
	cfg.Engine.SpeedUp = *speedUp
	if *perfTable != "" {
		pm, _, err := enginesim.ResolvePerf(*perfTable, os.ReadFile)
		if err != nil {
			return err
		}
		cfg.Engine.Perf = pm
	}
	if err := ad.Validate(); err != nil {
		return err
	}
	cfg.Admission = &ad
	cfg.SteadyOnly = *steady
	cfg.MaxGap = *maxGap
	cfg.Sessions = *sessions
	cfg.Seed = *seed

	if *cpuProfile != "" {
		fh, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(fh); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); fh.Close() }()
	}
	var rows []replay.Result
	var walls []time.Duration
	total := len(pols) * len(levels)
	for ri, c := range levels {
		for pi, p := range pols {
			if err := ctx.Err(); err != nil {
				return err
			}
			run := cfg
			run.Policy, run.Concurrency, run.Done = p, c, ctx.Done()
			label := fmt.Sprintf("[%d/%d] %s cc=%d", ri*len(pols)+pi+1, total, p, c)
			if !*quiet {
				run.Progress = progressBar(stderr, label)
			}
			var recs []trace.Record
			last := ri == len(levels)-1 && pi == len(pols)-1
			if *traceOut != "" && last {
				run.OnTurn = func(tr replay.TurnResult) { recs = append(recs, replay.Record(tr)) }
			}
			start := time.Now()
			res, err := replay.Run(w, run)
			if err != nil {
				return err
			}
			wall := time.Since(start)
			if !*quiet {
				fmt.Fprintf(stderr, "\r%s: done in %.1fs (%.0fx real time)\033[K\n", label, wall.Seconds(), res.MakespanS/wall.Seconds())
			}
			if *policyLabel != "" {
				res.Policy = *policyLabel
			}
			rows = append(rows, res)
			walls = append(walls, wall)
			if *jsonOut != "" {
				if err := writeRun(*jsonOut, args, *tracePath, cfg, *blockSize, *gpuBlocks, *hostBlocks, *diskBlocks, *maxGap, *seed, *speedUp, *sessions, *steady, ad, rows, walls); err != nil {
					return err
				}
			}
			if recs != nil {
				if err := writeRecords(*traceOut, recs); err != nil {
					return err
				}
			}
		}
	}
	printTable(stdout, rows, walls)
	if *plotOut != "" {
		title := fmt.Sprintf("%s on %d simulated workers (%d GPU blocks × %d tokens each)", *tracePath, cfg.Workers, *gpuBlocks, *blockSize)
		if err := os.WriteFile(*plotOut, plotSVG(title, rows), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeRun (re)writes the --json file; it runs after every run so that a
// long sweep leaves its finished rows behind if stopped.
func writeRun(path string, args []string, trace string, cfg replay.Config, blockSize, gpuBlocks, hostBlocks, diskBlocks int,
	maxGap time.Duration, seed int64, speedUp float64, sessions int, steady bool, ad admission.Config, rows []replay.Result, walls []time.Duration) error {
	ws := make([]float64, len(walls))
	for i, w := range walls {
		ws[i] = w.Seconds()
	}
	out := runFile{
		WallS:   ws,
		Command: "switchyard replay " + strings.Join(args, " "),
		Trace:   trace,
		Config: map[string]any{"workers": cfg.Workers, "block_size": blockSize, "gpu_blocks": gpuBlocks,
			"host_blocks": hostBlocks, "disk_blocks": diskBlocks, "pool_blocks": cfg.SharedPool.Pages, "pool_tp": cfg.SharedPool.Layout.TPSize,
			"pool_bandwidth_gbps": cfg.Engine.PoolTransferBandwidth / 1e9, "hints": cfg.Hints, "admission_tiers": ad.CapacityTiers, "max_gap_s": maxGap.Seconds(), "seed": seed,
			"speedup": speedUp, "sessions": sessions, "steady_only": steady, "admission": ad},
		Rows: rows,
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// runFile is what --json writes.
type runFile struct {
	Command string          `json:"command"`
	Trace   string          `json:"trace"`
	Config  map[string]any  `json:"config"`
	Rows    []replay.Result `json:"rows"`
	WallS   []float64       `json:"wall_s,omitempty"`
}

// mergeRuns joins the rows of several --json files (runs split across
// processes), ordered by concurrency then file order.
func mergeRuns(files []string, jsonOut, plotOut string, stdout io.Writer) error {
	var all runFile
	var walls []time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var rf runFile
		if err := json.Unmarshal(b, &rf); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if all.Config == nil {
			all.Trace, all.Config = rf.Trace, rf.Config
		}
		all.Command += rf.Command + "\n"
		for i, r := range rf.Rows {
			all.Rows = append(all.Rows, r)
			w := 0.0
			if i < len(rf.WallS) {
				w = rf.WallS[i]
			}
			all.WallS = append(all.WallS, w)
		}
	}
	idx := make([]int, len(all.Rows))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return all.Rows[idx[a]].Concurrency < all.Rows[idx[b]].Concurrency })
	rows := make([]replay.Result, len(idx))
	ws := make([]float64, len(idx))
	for i, j := range idx {
		rows[i], ws[i] = all.Rows[j], all.WallS[j]
		walls = append(walls, time.Duration(ws[i]*float64(time.Second)))
	}
	all.Rows, all.WallS = rows, ws
	printTable(stdout, rows, walls)
	if jsonOut != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if plotOut != "" {
		title := fmt.Sprintf("%v on %v simulated workers (%v GPU blocks × %v tokens each)", all.Trace, all.Config["workers"], all.Config["gpu_blocks"], all.Config["block_size"])
		return os.WriteFile(plotOut, plotSVG(title, rows), 0o644)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// loadWorkload reads every file, decoding them in parallel (the Weka set is
// 460 MB of JSON), and merges them in file order.
func loadWorkload(path string, f trace.Format, o trace.Options) (*trace.Workload, error) {
	files, err := trace.Files(path)
	if err != nil {
		return nil, err
	}
	parts := make([]*trace.Workload, len(files))
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				parts[i], errs[i] = trace.ReadFile(files[i], f, i+1, o)
			}
		})
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	all := &trace.Workload{Name: path}
	for i := range parts {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if err := all.Merge(parts[i]); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// progressBar draws one line on stderr, redrawn at most every 1% of sessions.
func progressBar(w io.Writer, label string) func(done, total int) {
	last := -1
	return func(done, total int) {
		pct := 100 * done / max(total, 1)
		if pct == last {
			return
		}
		last = pct
		const width = 30
		n := width * done / max(total, 1)
		fmt.Fprintf(w, "\r%s [%s%s] %3d%% %d/%d sessions", label, strings.Repeat("#", n), strings.Repeat(".", width-n), pct, done, total)
	}
}

func printTable(w io.Writer, rows []replay.Result, walls []time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tcc\ttok/s\tprompt tok/s\tcompute tok/s\thit rate\thit dev/host/disk/shared\treprefill Mtok\tpreempt\tTTFT p50 ms\tTTFT p99 ms\tITL p50 ms\tITL p99 ms\tpause s\twindow s\tmakespan s\twall s\tsim/wall\t")
	for i, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.4f\t%.2f/%.2f/%.2f/%.2f\t%.1f\t%d\t%.0f\t%.0f\t%.1f\t%.1f\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t\n",
			r.Policy, r.Concurrency, r.ThroughputTokensPerS, r.ServedPromptTokensPerS, r.ComputeTokensPerS, r.PrefixHitRate,
			r.HitRateByTier["device"], r.HitRateByTier["host"], r.HitRateByTier["disk"], r.HitRateByTier["shared"],
			float64(r.ReprefillTokens)/1e6, r.Preemptions, r.TTFTP50Ms, r.TTFTP99Ms, r.ITLP50Ms, r.ITLP99Ms, r.PauseTimeS,
			r.WindowS, r.MakespanS, walls[i].Seconds(), r.MakespanS/max(walls[i].Seconds(), 1e-9))
	}
	tw.Flush()
}

func writeRecords(path string, recs []trace.Record) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(fh)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			fh.Close()
			return err
		}
	}
	return fh.Close()
}

// plotSVG draws two panels side by side: model token throughput vs
// concurrency and prefix hit rate vs concurrency, one line per policy, on a
// log2 concurrency axis. Standard library only.
func plotSVG(title string, rows []replay.Result) []byte {
	const (
		pw, ph        = 460.0, 300.0 // panel plot area
		ml, mt, gap   = 70.0, 50.0, 110.0
		width, height = ml + 2*pw + gap + 30, mt + ph + 90
	)
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	var pols []string
	byPol := map[string][]replay.Result{}
	minC, maxC := 0, 0
	maxT := 0.0
	for _, r := range rows {
		if _, ok := byPol[r.Policy]; !ok {
			pols = append(pols, r.Policy)
		}
		byPol[r.Policy] = append(byPol[r.Policy], r)
		if minC == 0 || r.Concurrency < minC {
			minC = r.Concurrency
		}
		maxC = max(maxC, r.Concurrency)
		maxT = max(maxT, r.ThroughputTokensPerS)
	}
	if maxT <= 0 {
		maxT = 1
	}
	maxT = niceCeil(maxT)
	lg := func(c int) float64 { return logf(float64(c)) }
	xOf := func(c int, x0 float64) float64 {
		if maxC == minC {
			return x0 + pw/2
		}
		return x0 + (lg(c)-lg(minC))/(lg(maxC)-lg(minC))*pw
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="14" text-anchor="middle">%s</text>`+"\n", width/2, xmlEscape(title))
	panel := func(x0 float64, label string, yMax float64, yFmt func(float64) string, val func(replay.Result) float64, yMin float64) {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", x0, mt, pw, ph)
		yOf := func(v float64) float64 { return mt + ph - (v-yMin)/(yMax-yMin)*ph }
		for i := 0; i <= 5; i++ {
			v := yMin + (yMax-yMin)*float64(i)/5
			y := yOf(v)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+pw, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, yFmt(v))
		}
		seen := map[int]bool{}
		for _, r := range rows {
			if seen[r.Concurrency] {
				continue
			}
			seen[r.Concurrency] = true
			x := xOf(r.Concurrency, x0)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, mt, x, mt+ph)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, mt+ph+16, r.Concurrency)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">concurrency (sessions active at once)</text>`+"\n", x0+pw/2, mt+ph+34)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+pw/2, mt-8, label)
		for i, p := range pols {
			c := colors[i%len(colors)]
			var pts []string
			for _, r := range byPol[p] {
				x, y := xOf(r.Concurrency, x0), yOf(val(r))
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x, y, c)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		}
	}
	panel(ml, "model token throughput (prompt + output tokens/s)", maxT, func(v float64) string { return humanNum(v) },
		func(r replay.Result) float64 { return r.ThroughputTokensPerS }, 0)
	minHit := 1.0
	for _, r := range rows {
		minHit = min(minHit, r.PrefixHitRate)
	}
	hitLo := float64(int(minHit*10)) / 10
	if hitLo >= 1 {
		hitLo = 0.9
	}
	panel(ml+pw+gap, "prefix-cache hit rate", 1, func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) },
		func(r replay.Result) float64 { return r.PrefixHitRate }, hitLo)
	for i, p := range pols {
		x := ml + float64(i)*150
		y := mt + ph + 62
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, x, y, x+24, y, colors[i%len(colors)])
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+30, y+4, xmlEscape(p))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func logf(x float64) float64 { return math.Log2(x) }

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func humanNum(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
