package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/pprof"
	"slices"
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
	"switchyard.dev/pkg/trace"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/tracefile"
)

const replayUsage = `Usage: switchyard replay --trace <file|dir> --format <dynamo|mooncake|agentic-mooncake|weka> [flags]
       switchyard replay --merge a.json,b.json [--json out.json] [--plot out.svg] [--html out.html]
       switchyard replay report --template T.md.tmpl --out results.md name=a.json ...

Replays a trace on a simulated cluster (discrete events on virtual time, the
real routing, indexing, admission and engine cores, no RPC). For each
(policy, concurrency) it runs --seeds independent draws: sessions drawn with
replacement from the --split, a closed loop of that many sessions, the first
ones started staggered, a --warmup that is not measured and a --window that is,
the same for every policy. Prints a table of the mean and the spread over the
seeds; --json writes the rows (with every seed's run), --plot an SVG of
turns/min and prefix hit rate vs concurrency, --html one self-contained page
(no fetches, no script) with the run's parameters, plots of turns/min,
throughput, hit rate and TTFT vs concurrency with the seeds' spread, and the
table. TTFT and pause time include the turns still waiting when the window
closes (lower bounds).

Policies: round_robin, least_loaded, kv (Dynamo's KvRouter defaults),
kv_sticky (kv with hard session affinity), kv_cap (kv behind a cap of
--session-cap × workers active sessions, held from a session's first turn to
its end), thunderagent (ThunderAgent's
admission with upstream's defaults), session_aware (Switchyard's admission,
the admission flags below), oracle (kv with unbounded device KV: an upper
bound).

Flags:
`

// replayCmd is `switchyard replay`.
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "report" {
		return reportCmd(args[1:], stdout, stderr)
	}
	fs := newFlagSet("replay", replayUsage, stderr)
	d := replay.DefaultConfig()
	tracePath := fs.String("trace", "", "trace file or directory (required)")
	format := fs.String("format", "weka", "trace format: dynamo, mooncake, agentic-mooncake, weka")
	traceBlock := fs.Int("trace-block-size", 0, "tokens per hash id for Mooncake formats (0 = 512)")
	policies := fs.String("policies", "round_robin,kv,kv_sticky,kv_cap,thunderagent,session_aware,oracle", "comma-separated policies")
	conc := fs.String("concurrency", "1,4,16,64", "comma-separated concurrency levels (sessions active at once)")
	workers := fs.Int("workers", d.Workers, "simulated workers")
	perf := fs.String("perf", enginesim.DefaultPreset, "engine step times and worker size: a preset ("+strings.Join(presetNames(), ", ")+"), mocker (Dynamo's polynomials) or a JSON table file")
	blockSize := fs.Int("block-size", d.Engine.BlockSize, "engine KV block size in tokens")
	gpuBlocks := fs.Int("gpu-blocks", 0, "device KV blocks per worker (0 = the --perf preset's capacity)")
	maxModelLen := fs.Int("max-model-len", 0, "longest prompt plus output; longer turns are clipped to their first tokens (0 = the --perf preset's model's)")
	hostBlocks := fs.Int("host-blocks", 0, "host (CPU) KV blocks per worker; 0 = no host tier")
	hostKV := fs.String("host-kv", "", "host (CPU) KV per worker as a multiple of its device KV (4x) or in tokens (2000000); instead of --host-blocks")
	diskBlocks := fs.Int("disk-blocks", 0, "disk KV blocks per worker; 0 = no disk tier")
	poolBlocks := fs.Int("pool-blocks", 0, "shared KV pool (Mooncake-like) capacity in blocks for the whole cluster; 0 = no pool")
	poolTP := fs.Int("pool-tp", 1, "tensor-parallel ranks per page in the shared pool (objects per page = 2 × this)")
	poolBW := fs.Float64("pool-bandwidth", enginesim.DefaultConfig().PoolTransferBandwidth/1e9, "shared pool → GPU bandwidth per worker in GB/s")
	hintsOn := fs.Bool("hints", false, "run the KV hint policies (the kvhint emitter's) against the simulated engines")
	hintsDisabled := fs.String("hints-disabled", strings.Join(hints.DefaultConfig().Disabled, ","), "with --hints: comma-separated policies that never fire (\"\" = all on); policies: "+strings.Join(hints.PolicyNames(), ", "))
	maxSeqs := fs.Int("max-num-seqs", 0, "max running requests per worker (0 = engine default)")
	batched := fs.Int("max-batched-tokens", 0, "max tokens per step (0 = engine default)")
	speedUp := fs.Float64("speedup", 1, "engine speed-up factor (2 = twice as fast as the perf model)")
	maxGap := fs.Duration("max-gap", d.MaxGap, "cap every gap between turns (a longer one is a user away; 0 = as in the trace)")
	split := fs.String("split", string(replay.SplitAll), "sessions to draw from: all, tune (choose defaults here) or test (report these)")
	seeds := fs.Int("seeds", 3, "independent draws per (policy, concurrency)")
	seed := fs.Int64("seed", d.Seed, "first seed (the runs use seed … seed+seeds−1)")
	warmup := fs.Duration("warmup", d.Warmup, "simulated time run before the window, not measured")
	window := fs.Duration("window", d.Window, "measured simulated time, the same for every policy")
	sessionCap := fs.Int("session-cap", d.SessionCap, "kv_cap: active sessions per worker (the fleet has this × --workers slots)")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "runs simulated at once")
	replicas := fs.Int("scheduler-replicas", 1, "scheduler replicas, each owning the programs rendezvous hashing gives it and admitting with its share of each worker")
	syncDelay := fs.Duration("sync-delay", 0, "with --scheduler-replicas: how old the other replicas' use of each worker is when a replica hears it")
	sessionEnd := fs.String("session-end", string(replay.SessionEndExplicit), "how a session's end reaches the scheduler: explicit (told when its last turn and tail sub-agents are done; no live client does this), final (its last turn marked x-dynamo-session-final, as loadgen sends it) or idle (nothing, as from Claude Code, Codex, OpenCode: the program is released after the policy's idle TTL, session_aware's --idle-ttl, 0 = never)")
	ad := admission.DefaultConfig()
	ad.RegisterFlags(fs, "session_aware: ")
	fs.DurationVar(&ad.TickInterval, "tick", ad.TickInterval, "session_aware: admission tick interval")
	fs.DurationVar(&ad.IdleTTL, "idle-ttl", ad.IdleTTL, "session_aware: release ACTING programs idle this long (0 = never)")
	policyLabel := fs.String("label", "", "name the rows' policy this (to tell tuned variants apart in --merge and reports)")
	jsonOut := fs.String("json", "", "write the rows as JSON here")
	plotOut := fs.String("plot", "", "write an SVG plot here")
	htmlOut := fs.String("html", "", "write a self-contained HTML report (parameters, plots, table) here")
	traceOut := fs.String("trace-out", "", "write the simulated requests of the last run as request_end JSONL here (for 'switchyard trace perfetto')")
	quiet := fs.Bool("quiet", false, "no progress line")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the runs here")
	merge := fs.String("merge", "", "comma-separated JSON files of earlier runs: print, plot and write their rows together instead of simulating (runs with a policy at the same level need --label to tell them apart)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *merge != "" {
		// --merge simulates nothing: a flag of the simulation would be
		// ignored without a word.
		var ignored []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "merge", "json", "plot", "html":
			default:
				ignored = append(ignored, "--"+f.Name)
			}
		})
		if len(ignored) > 0 {
			fmt.Fprintf(stderr, "switchyard replay: --merge prints, plots and writes earlier runs' rows; it takes only --json, --plot and --html, not %s\n", strings.Join(ignored, ", "))
			return errUsage
		}
		return mergeRuns(servicekit.SplitList(*merge), *jsonOut, *plotOut, *htmlOut, stdout, stderr)
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
	var pols []replay.Policy
	for _, p := range servicekit.SplitList(*policies) {
		pol, err := replay.ParsePolicy(p)
		if err != nil {
			return err
		}
		if slices.Contains(pols, pol) {
			return fmt.Errorf("--policies names %s twice", pol)
		}
		pols = append(pols, pol)
	}
	var levels []int
	for _, c := range servicekit.SplitList(*conc) {
		n, err := strconv.Atoi(c)
		if err != nil || n <= 0 || n > replay.MaxConcurrency {
			return fmt.Errorf("--concurrency %q: want whole numbers from 1 to %d, comma-separated (1,4,16)", c, replay.MaxConcurrency)
		}
		if slices.Contains(levels, n) {
			return fmt.Errorf("--concurrency names %d twice", n)
		}
		levels = append(levels, n)
	}
	if len(pols) == 0 || len(levels) == 0 {
		return fmt.Errorf("need at least one policy and one concurrency level")
	}
	sp, err := replay.ParseSplit(*split)
	if err != nil {
		return err
	}
	if *seeds <= 0 {
		return fmt.Errorf("--seeds %d: want at least 1", *seeds)
	}
	if *parallel <= 0 {
		return fmt.Errorf("--parallel %d: want at least 1", *parallel)
	}
	if *policyLabel != "" && len(pols) > 1 {
		return fmt.Errorf("--label %q names the rows of one policy, and --policies gives %d", *policyLabel, len(pols))
	}
	if err := checkReplayNumbers(
		intFlag{"--workers", *workers, 1, replay.MaxWorkers}, intFlag{"--block-size", *blockSize, 1, 0},
		intFlag{"--gpu-blocks", *gpuBlocks, 0, 0}, intFlag{"--max-model-len", *maxModelLen, 0, 0},
		intFlag{"--host-blocks", *hostBlocks, 0, 0}, intFlag{"--disk-blocks", *diskBlocks, 0, 0},
		intFlag{"--pool-blocks", *poolBlocks, 0, 0}, intFlag{"--pool-tp", *poolTP, 1, 0},
		intFlag{"--trace-block-size", *traceBlock, 0, 0}, intFlag{"--session-cap", *sessionCap, 1, 0},
		intFlag{"--max-num-seqs", *maxSeqs, 0, 0}, intFlag{"--max-batched-tokens", *batched, 0, 0},
		intFlag{"--scheduler-replicas", *replicas, 1, replay.MaxSchedulerReplicas},
	); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--speedup", *speedUp}, {"--pool-bandwidth", *poolBW}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s %v: want a positive number", f.name, f.v)
		}
	}
	if *maxGap < 0 {
		return fmt.Errorf("--max-gap %v: want 0 (gaps as in the trace) or a positive cap", *maxGap)
	}
	// Simulated time is a time.Duration from the start: a year of it is more
	// than any experiment, and keeps every sum of gaps far from overflowing.
	if year := 365 * 24 * time.Hour; *warmup > year || *window > year {
		return fmt.Errorf("--warmup %v and --window %v: each at most a year of simulated time", *warmup, *window)
	}

	cfg := d
	cfg.Workers = *workers
	cfg.Engine.BlockSize = *blockSize
	pm, preset, err := enginesim.ResolvePerf(*perf, os.ReadFile)
	if err != nil {
		return err
	}
	cfg.Engine.Perf = pm
	if preset != nil {
		preset.Apply(&cfg.Engine)
	}
	if *gpuBlocks > 0 {
		cfg.Engine.NumGPUBlocks = *gpuBlocks
	}
	if *maxModelLen > 0 {
		cfg.Engine.Model.MaxModelLen = *maxModelLen
	}
	cfg.Engine.HostBlocks = *hostBlocks
	if *hostKV != "" {
		if *hostBlocks > 0 {
			return fmt.Errorf("--host-kv and --host-blocks both set: give one")
		}
		if cfg.Engine.HostBlocks, err = parseHostKV(*hostKV, cfg.Engine.NumGPUBlocks, cfg.Engine.BlockSize); err != nil {
			return err
		}
	}
	cfg.Engine.DiskBlocks = *diskBlocks
	cfg.Engine.PoolTransferBandwidth = *poolBW * 1e9
	cfg.SharedPool = replay.PoolConfig{Pages: *poolBlocks}
	cfg.SharedPool.Layout.TPSize = *poolTP
	if !*hintsOn && flagSet(fs, "hints-disabled") {
		return fmt.Errorf("--hints-disabled says which hint policies never fire, and runs none without --hints")
	}
	if *hintsOn {
		hc := hints.DefaultConfig()
		hc.Disabled = servicekit.SplitList(*hintsDisabled)
		if err := hc.Validate(); err != nil {
			return err
		}
		cfg.Hints = &hc
	}
	cfg.Engine.MaxNumSeqs = *maxSeqs
	cfg.Engine.MaxNumBatchedTokens = *batched
	cfg.Engine.SpeedUp = *speedUp
	// The admission knobs replay names its own way; Validate names the
	// others by their flags.
	switch {
	case ad.TickInterval <= 0:
		return fmt.Errorf("--tick %v: must be positive", ad.TickInterval)
	case ad.IdleTTL < 0:
		return fmt.Errorf("--idle-ttl %v: must not be negative", ad.IdleTTL)
	}
	if err := ad.Validate(); err != nil {
		return err
	}
	cfg.Admission = &ad
	cfg.SessionCap = *sessionCap
	if *syncDelay < 0 {
		return fmt.Errorf("--sync-delay %v: want 0 or a positive duration", *syncDelay)
	}
	if *replicas == 1 && *syncDelay > 0 {
		return fmt.Errorf("--sync-delay %v needs --scheduler-replicas above 1: one scheduler has no other replicas to hear from", *syncDelay)
	}
	cfg.SchedulerReplicas, cfg.SyncDelay = *replicas, *syncDelay
	if cfg.SessionEnd, err = replay.ParseSessionEnd(*sessionEnd); err != nil {
		return err
	}
	cfg.MaxGap = *maxGap
	cfg.Split = sp
	cfg.Warmup, cfg.Window = *warmup, *window
	if cfg.Window <= 0 {
		return fmt.Errorf("--window %v: want a positive duration", cfg.Window)
	}
	if cfg.Warmup < 0 {
		return fmt.Errorf("--warmup %v: want 0 or a positive duration", cfg.Warmup)
	}
	if err := checkOutputs([2]string{"--json", *jsonOut}, [2]string{"--plot", *plotOut}, [2]string{"--html", *htmlOut},
		[2]string{"--trace-out", *traceOut}, [2]string{"--cpuprofile", *cpuProfile}); err != nil {
		return err
	}

	t0 := time.Now()
	w, err := loadWorkload(*tracePath, f, trace.Options{BlockSize: *traceBlock}, stderr)
	if err != nil {
		return err
	}
	st := w.Stats()
	fmt.Fprintf(stderr, "loaded %s: %d sessions (%d top-level, %d in split %s), %d turns, %.2fG prompt tokens, in %.1fs\n",
		*tracePath, st.Sessions, st.TopLevel, len(replay.SplitSessions(w, sp)), sp, st.Turns, float64(st.InputTokens)/1e9, time.Since(t0).Seconds())
	if cfg.SchedulerReplicas > 1 {
		fmt.Fprintf(stderr, "%d scheduler replicas, each hearing the others' use %v late\n", cfg.SchedulerReplicas, cfg.SyncDelay)
	}

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

	var jobs []runJob
	for _, c := range levels {
		for _, p := range pols {
			for k := range *seeds {
				run := cfg
				run.Policy, run.Concurrency, run.Seed, run.Done = p, c, *seed+int64(k), ctx.Done()
				jobs = append(jobs, runJob{cfg: run})
			}
		}
	}
	if *traceOut != "" {
		last := &jobs[len(jobs)-1]
		last.recs = new([]trace.Record)
		last.cfg.OnTurn = func(tr replay.TurnResult) { *last.recs = append(*last.recs, replay.Record(tr)) }
	}
	var prog *progress
	if !*quiet {
		prog = newProgress(stderr, len(jobs))
	}
	wallStart := time.Now()
	if err := runJobs(w, jobs, *parallel, prog); err != nil {
		return err
	}
	if prog != nil {
		prog.finish(time.Since(wallStart))
	}
	var rows []replay.Row
	for i := 0; i < len(jobs); i += *seeds {
		var runs []replay.Result
		for _, j := range jobs[i : i+*seeds] {
			if *policyLabel != "" {
				j.res.Policy = *policyLabel
			}
			runs = append(runs, j.res)
		}
		row, err := replay.Aggregate(runs)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	printTable(stdout, rows)
	out := runFile{Command: "switchyard replay " + strings.Join(experimentArgs(args), " "), Trace: *tracePath,
		Config: runConfig(cfg, *perf, *seeds, *seed, ad), Rows: rows}
	title := fmt.Sprintf("%s, %s split, on %d × %s (%d KV tokens each)", *tracePath, sp, cfg.Workers, *perf, cfg.Engine.NumGPUBlocks*cfg.Engine.BlockSize)
	errs := writeRunOutputs(out, *jsonOut, *htmlOut, *plotOut, title)
	if last := jobs[len(jobs)-1]; last.recs != nil {
		errs = append(errs, flagErr("--trace-out", writeRecords(*traceOut, *last.recs)))
	}
	return errors.Join(errs...)
}

// writeRunOutputs writes the rows' --json, --html and --plot (those given):
// one that cannot be written loses none of the others.
func writeRunOutputs(rf runFile, jsonOut, htmlOut, plotOut, plotTitle string) []error {
	var errs []error
	if jsonOut != "" {
		errs = append(errs, flagErr("--json", writeJSON(jsonOut, rf)))
	}
	if htmlOut != "" {
		errs = append(errs, flagErr("--html", writeHTML(htmlOut, rf)))
	}
	if plotOut != "" {
		errs = append(errs, flagErr("--plot", os.WriteFile(plotOut, plotSVG(plotTitle, rf.Rows), 0o644)))
	}
	return errs
}

// flagSet reports whether the command line gave the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// flagErr names the flag whose output err failed to write (nil stays nil).
func flagErr(flag string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", flag, err)
}

// checkOutputs refuses, before hours of simulation, an output path that
// cannot be written: a directory, an existing file (or /dev/stdout) not open
// for writing, or a directory where no file can be made. It truncates
// nothing and leaves nothing behind.
func checkOutputs(outs ...[2]string) error {
	for _, o := range outs {
		flag, path := o[0], o[1]
		if path == "" {
			continue
		}
		if st, err := os.Stat(path); err == nil {
			if st.IsDir() {
				return fmt.Errorf("%s %s: is a directory", flag, path)
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return fmt.Errorf("%s %s: cannot write it: %w", flag, path, err)
			}
			f.Close()
			continue
		}
		f, err := os.CreateTemp(filepath.Dir(path), ".switchyard-check-*")
		if err != nil {
			return fmt.Errorf("%s %s: cannot write there: %w", flag, path, err)
		}
		f.Close()
		os.Remove(f.Name())
	}
	return nil
}

func presetNames() []string {
	var names []string
	for _, p := range enginesim.Presets() {
		names = append(names, p.Name)
	}
	return names
}

// runConfig is what --json records of the cluster and the experiment.
func runConfig(cfg replay.Config, perf string, seeds int, seed int64, ad admission.Config) map[string]any {
	e := cfg.Engine
	m := map[string]any{"workers": cfg.Workers, "perf": perf, "block_size": e.BlockSize, "gpu_blocks": e.NumGPUBlocks,
		"kv_capacity_tokens_per_worker": e.NumGPUBlocks * e.BlockSize, "max_model_len": e.Model.MaxModelLen,
		"host_blocks": e.HostBlocks, "disk_blocks": e.DiskBlocks, "pool_blocks": cfg.SharedPool.Pages, "pool_tp": cfg.SharedPool.Layout.TPSize,
		"pool_bandwidth_gbps": e.PoolTransferBandwidth / 1e9, "hints": cfg.Hints, "max_gap_s": cfg.MaxGap.Seconds(),
		"split": cfg.Split, "seeds": seeds, "first_seed": seed, "warmup_s": cfg.Warmup.Seconds(), "window_s": cfg.Window.Seconds(),
		"session_cap": cfg.SessionCap, "speedup": e.SpeedUp, "admission": ad}
	if cfg.SchedulerReplicas > 1 { // only then: a lone scheduler's runs record what they always did
		m["scheduler_replicas"], m["sync_delay_s"] = cfg.SchedulerReplicas, cfg.SyncDelay.Seconds()
	}
	if cfg.SessionEnd != replay.SessionEndExplicit { // likewise
		m["session_end"] = cfg.SessionEnd
	}
	return m
}

// experimentArgs are the arguments that make the results: the command line
// without the flags that only say where output goes or how fast it comes
// (so the same experiment records the same command, byte for byte).
func experimentArgs(args []string) []string {
	output := map[string]bool{"json": true, "plot": true, "html": true, "trace-out": true, "cpuprofile": true, "quiet": false, "parallel": true}
	var out []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if takesValue, ok := output[name]; ok && strings.HasPrefix(args[i], "-") {
			if takesValue && !hasValue {
				i++ // the value is the next argument
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// runJob is one (policy, concurrency, seed) run.
type runJob struct {
	cfg  replay.Config
	res  replay.Result
	recs *[]trace.Record // --trace-out, for the last run
}

// runJobs simulates the runs, parallel at once; each run is single-threaded
// and deterministic, so the order they run in changes nothing.
func runJobs(w *trace.Workload, jobs []runJob, parallel int, prog *progress) error {
	next := make(chan int)
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for range min(parallel, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				j := &jobs[i]
				if prog != nil {
					j.cfg.Progress = prog.tracker(i, j.cfg)
				}
				j.res, errs[i] = replay.Run(w, j.cfg)
				if prog != nil {
					prog.done(i, errs[i] == nil)
				}
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	// An interrupt aborts every run left: said once, with how far it got,
	// not once a run.
	done, aborted := 0, false
	var failed []error
	for _, err := range errs {
		switch {
		case err == nil:
			done++
		case errors.Is(err, replay.ErrAborted):
			aborted = true
		default:
			failed = append(failed, err)
		}
	}
	if prog != nil && (aborted || len(failed) > 0) {
		prog.end()
	}
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	if aborted {
		return fmt.Errorf("replay: interrupted after %d of %d runs", done, len(jobs))
	}
	return nil
}

// progress draws one line on stderr: runs done, and how far each running
// one is in simulated time. It is redrawn at most five times a second.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	total   int
	nDone   int
	running map[int]string
	frac    map[int]float64
	last    time.Time
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, running: map[int]string{}, frac: map[int]float64{}}
}

func (p *progress) tracker(i int, c replay.Config) func(now, end time.Duration) {
	label := fmt.Sprintf("%s cc=%d seed=%d", c.Policy, c.Concurrency, c.Seed)
	p.mu.Lock()
	p.running[i] = label
	p.mu.Unlock()
	return func(now, end time.Duration) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.frac[i] = float64(now) / float64(end)
		p.draw(false)
	}
}

// done ends run i's line; ok: it completed (a failed or aborted run is
// not counted done).
func (p *progress) done(i int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.running, i)
	delete(p.frac, i)
	if ok {
		p.nDone++
	}
	p.draw(true)
}

// end ends the progress line where it stands, for an error to follow.
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w)
}

func (p *progress) draw(force bool) {
	if !force && time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	ids := make([]int, 0, len(p.running))
	for i := range p.running {
		ids = append(ids, i)
	}
	sort.Ints(ids)
	var parts []string
	for _, i := range ids {
		parts = append(parts, fmt.Sprintf("%s %3.0f%%", p.running[i], 100*p.frac[i]))
	}
	const width = 24
	n := width * p.nDone / max(p.total, 1)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d runs  %s\033[K", strings.Repeat("#", n), strings.Repeat(".", width-n), p.nDone, p.total, strings.Join(parts, ", "))
}

func (p *progress) finish(wall time.Duration) {
	fmt.Fprintf(p.w, "\r%d runs in %.1fs\033[K\n", p.total, wall.Seconds())
}

// runFile is what --json writes: nothing in it depends on the machine or
// the moment, so the same experiment writes the same bytes.
type runFile struct {
	Command string         `json:"command"`
	Trace   string         `json:"trace"`
	Config  map[string]any `json:"config"`
	Rows    []replay.Row   `json:"rows"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readRunFile(path string) (runFile, error) {
	var rf runFile
	b, err := os.ReadFile(path)
	if err != nil {
		return rf, err
	}
	if err := json.Unmarshal(b, &rf); err != nil {
		return rf, fmt.Errorf("%s: %w", path, err)
	}
	if rf.Config == nil || len(rf.Rows) == 0 {
		return rf, fmt.Errorf("%s: not the --json of a replay (no config or no rows)", path)
	}
	return rf, nil
}

// mergeRuns joins the rows of several --json files (runs split across
// processes), ordered by concurrency then file order. The merged config is
// the first file's: files whose configs differ are merged (a tuning grid's
// variants are), with a word on stderr saying how they differ, but two rows
// of one name at one level cannot be told apart and are refused.
func mergeRuns(files []string, jsonOut, plotOut, htmlOut string, stdout, stderr io.Writer) error {
	if len(files) == 0 {
		return fmt.Errorf("--merge names no file")
	}
	var all runFile
	type rowKey struct {
		policy string
		cc     int
	}
	from := map[rowKey]string{}
	for _, f := range files {
		rf, err := readRunFile(f)
		if err != nil {
			return err
		}
		if all.Config == nil {
			all.Trace, all.Config = rf.Trace, rf.Config
		} else {
			if keys := differingKeys(all.Config, rf.Config); len(keys) > 0 {
				fmt.Fprintf(stderr, "merge: %s differs from %s in %s; the merged config is the first's (--label tells the rows apart)\n",
					f, files[0], strings.Join(keys, ", "))
			}
			if rf.Trace != all.Trace {
				fmt.Fprintf(stderr, "merge: %s replays %s, %s replays %s; the merged file, table and plot name the first's trace\n",
					f, rf.Trace, files[0], all.Trace)
			}
		}
		for _, r := range rf.Rows {
			k := rowKey{r.Policy, r.Concurrency}
			if prev, dup := from[k]; dup {
				return fmt.Errorf("merge: %s and %s both have %s at concurrency %d: run them with --label to tell them apart", prev, f, r.Policy, r.Concurrency)
			}
			from[k] = f
		}
		all.Command += rf.Command + "\n"
		all.Rows = append(all.Rows, rf.Rows...)
	}
	sort.SliceStable(all.Rows, func(a, b int) bool { return all.Rows[a].Concurrency < all.Rows[b].Concurrency })
	printTable(stdout, all.Rows)
	title := fmt.Sprintf("%v on %v × %v", all.Trace, all.Config["workers"], all.Config["perf"])
	return errors.Join(writeRunOutputs(all, jsonOut, htmlOut, plotOut, title)...)
}

// intFlag is an integer flag, the least value it takes and, when above 0,
// the most.
type intFlag struct {
	name           string
	v, least, most int
}

// checkReplayNumbers refuses an integer flag out of its range, by name,
// before the trace is loaded (below its least value the engine would put its
// default in silently while the JSON recorded the value given).
func checkReplayNumbers(flags ...intFlag) error {
	for _, f := range flags {
		if f.v < f.least || f.most > 0 && f.v > f.most {
			if f.most > 0 {
				return fmt.Errorf("%s %d: want %d to %d", f.name, f.v, f.least, f.most)
			}
			return fmt.Errorf("%s %d: want at least %d", f.name, f.v, f.least)
		}
	}
	return nil
}

// differingKeys lists, sorted, the config keys whose values differ between
// a and b (a key in one only counts).
func differingKeys(a, b map[string]any) []string {
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || !reflect.DeepEqual(v, w) {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// loadWorkload reads the trace at path (tracefile.Load) and checks it once
// for every run; what a reader passed over (trace.Workload.Warnings) is
// said on warn.
func loadWorkload(path string, f trace.Format, o trace.Options, warn io.Writer) (*trace.Workload, error) {
	all, err := tracefile.Load(path, f, o)
	if err != nil {
		return nil, err
	}
	// Checked once loaded, so that a trace no run could use (parents in a
	// cycle, a sub-agent that names no session) is refused before the
	// progress bar starts rather than by every run.
	if err := all.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, m := range all.Warnings {
		fmt.Fprintf(warn, "warning: %s\n", m)
	}
	return all, nil
}

func printTable(w io.Writer, rows []replay.Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tcc\tseeds\tturns/min\t[min, max]\ttok/s\tcompute tok/s\tbusy\thit rate\tideal\tTTFT p50 ms\tTTFT p99 ms\tslowdown p50/p99\tpause s\tevicted recomp Mtok\tpreempt recomp Mtok\topen\twindow s\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t[%.1f, %.1f]\t%.0f\t%.0f\t%.2f\t%.3f\t%.3f\t%.0f\t%.0f\t%.2f/%.2f\t%.0f\t%.2f\t%.3f\t%.0f\t%.0f\t\n",
			r.Policy, r.Concurrency, r.Seeds, r.TurnsPerMin, r.TurnsPerMinMin, r.TurnsPerMinMax, r.ThroughputTokensPerS, r.ComputeTokensPerS,
			r.BusyFraction, r.PrefixHitRate, r.IdealHitRate, r.TTFTP50Ms, r.TTFTP99Ms, r.SlowdownP50, r.SlowdownP99, r.PauseTimeS,
			r.EvictedRecomputedTokens/1e6, r.PreemptRecomputedTokens/1e6, r.OpenTurns, r.WindowS)
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

// parseHostKV reads --host-kv: a multiple of the device KV ("4x") or a
// number of tokens, as host blocks per worker.
func parseHostKV(v string, gpuBlocks, blockSize int) (int, error) {
	const most = enginesim.MaxTierBlocks
	if m, ok := strings.CutSuffix(v, "x"); ok {
		f, err := strconv.ParseFloat(m, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("--host-kv %q: want a positive multiple such as 4x", v)
		}
		blocks := f * float64(gpuBlocks)
		if blocks < 1 || blocks > most {
			return 0, fmt.Errorf("--host-kv %q: %.4g host blocks of %d device blocks; want 1 to %d", v, blocks, gpuBlocks, most)
		}
		return int(blocks), nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < int64(blockSize) || n/int64(blockSize) > most {
		return 0, fmt.Errorf("--host-kv %q: want a multiple of device KV (4x) or tokens from one block (%d) to %d blocks", v, blockSize, most)
	}
	return int(n / int64(blockSize)), nil
}
