package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"switchyard.dev/pkg/replay"
)

func TestReplayTracePerfettoEndToEnd(t *testing.T) {
	dir := t.TempDir()
	jsonOut, plot, recs, pf := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg"), filepath.Join(dir, "t.jsonl"), filepath.Join(dir, "p.json")
	table := replaySmall(t, "10m", "--policies", "kv,session_aware,oracle", "--json", jsonOut, "--plot", plot, "--trace-out", recs)
	if !strings.Contains(table, "session_aware") {
		t.Errorf("table:\n%s", table)
	}
	var out struct {
		Rows []map[string]any `json:"rows"`
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Rows) != 6 {
		t.Fatalf("%d rows", len(out.Rows))
	}
	for _, row := range out.Rows {
		for _, k := range []string{"policy", "concurrency", "seeds", "window_s", "turns_per_min", "turns_per_min_min", "turns_per_min_max",
			"throughput_tokens_per_s", "prefix_hit_rate", "ideal_hit_rate", "ttft_p50_ms", "ttft_p99_ms"} {
			if _, ok := row[k]; !ok {
				t.Errorf("row lacks %s", k)
			}
		}
		if row["window_s"] != 600.0 || row["seeds"] != 2.0 {
			t.Errorf("row %v: window %v, seeds %v", row["policy"], row["window_s"], row["seeds"])
		}
	}
	// A run merged with itself has rows no one can tell apart; the same
	// rows under another label merge.
	merged, relabelled := filepath.Join(dir, "m.json"), filepath.Join(dir, "l.json")
	if err := runErr("replay", "--merge", jsonOut+","+jsonOut, "--json", merged); err == nil || !strings.Contains(err.Error(), "--label") {
		t.Fatalf("a run merged with itself: %v, want an error asking for --label", err)
	}
	var file map[string]any
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	for _, row := range file["rows"].([]any) {
		row.(map[string]any)["policy"] = "again/" + row.(map[string]any)["policy"].(string)
	}
	if b, err = json.Marshal(file); err != nil || os.WriteFile(relabelled, b, 0o644) != nil {
		t.Fatal(err)
	}
	mustRun(t, "replay", "--merge", jsonOut+","+relabelled, "--json", merged, "--plot", plot)
	if b, err = os.ReadFile(merged); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Rows) != 12 {
		t.Fatalf("merged %d rows (%v)", len(out.Rows), err)
	}
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("plot is not XML: %v", err)
		}
	}
	mustRun(t, "trace", "perfetto", recs, "-o", pf)
	b, err = os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string `json:"name"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range doc.TraceEvents {
		if strings.HasPrefix(e.Name, "LLM request") {
			n++
		}
	}
	lines, err := os.ReadFile(recs)
	if err != nil {
		t.Fatal(err)
	}
	if want := bytes.Count(lines, []byte("\n")); n == 0 || n != want { // a slice per completed turn of the last run
		t.Errorf("%d request slices for %d records", n, want)
	}
}

func TestExperimentArgsDropOutputFlags(t *testing.T) {
	got := strings.Join(experimentArgs([]string{"--trace", "t", "--json", "/tmp/x.json", "--plot=/tmp/p.svg", "--quiet",
		"--parallel", "2", "--seeds", "3", "-cpuprofile", "c.out", "--trace-out", "r.jsonl"}), " ")
	if want := "--trace t --seeds 3"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// runErr runs the command line and returns its error.
func runErr(args ...string) error {
	var stdout, stderr bytes.Buffer
	return run(context.Background(), args, &stdout, &stderr)
}

// What is not a replay's --json is refused by --merge and by report, not
// read as a run without rows; what holds no request is refused by trace
// perfetto, not written as an empty timeline.
func TestMergeRefusesWhatIsNotARun(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", "--merge", other},
		{"replay", "report", "--template", other, "x=" + other},
	} {
		if err := runErr(args...); err == nil || !strings.Contains(err.Error(), "not the --json of a replay") {
			t.Errorf("switchyard %s: %v", strings.Join(args, " "), err)
		}
	}
	if err := runErr("replay", "--merge", ","); err == nil {
		t.Error("--merge of no file: no error")
	}
	if err := runErr("replay", "report", "--template", other, "--out", filepath.Join(dir, "missing", "r.md"), "x="+other); err == nil ||
		!strings.Contains(err.Error(), "--out") {
		t.Errorf("report --out into a missing directory: %v", err)
	}
	if err := runErr("trace", "perfetto", other, "-o", filepath.Join(dir, "p.json")); err == nil || !strings.Contains(err.Error(), "no request_end or tool record") {
		t.Errorf("trace perfetto of a file without requests or tools: %v", err)
	}
}

// --merge simulates nothing: a simulation's flag beside it is refused, not
// ignored (--merge runs.json --policies kv printed every policy's rows).
func TestMergeRefusesTheSimulationsFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "--merge", "runs.json", "--trace", smallTrace, "--policies", "kv"}, &stdout, &stderr)
	if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), "not --policies, --trace") {
		t.Fatalf("replay --merge with --trace and --policies: %v, stderr %q", err, stderr.String())
	}
}

// A word among the flags would end their parsing and drop every flag after
// it: it is refused.
func TestAStrayArgumentIsRefused(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "--trace", smallTrace, "extra", "--window", "0"}, &stdout, &stderr)
	if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), `unexpected argument "extra"`) {
		t.Fatalf("replay with a stray word: %v, stderr %q", err, stderr.String())
	}
}

// A trace whose sub-agents wait on each other in a cycle can start no
// session: it is refused when it is loaded, naming the trace, before any
// run starts.
func TestACyclicTraceIsRefusedWhenLoaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cycle.jsonl")
	rows := `{"session_id":"a","request_id":"a1","timestamp":0,"input_length":100,"output_length":10,"hash_ids":[1],"wait_for":["c1"]}
{"session_id":"b","request_id":"b1","timestamp":1,"input_length":100,"output_length":10,"hash_ids":[2],"wait_for":["a1"]}
{"session_id":"c","request_id":"c1","timestamp":2,"input_length":100,"output_length":10,"hash_ids":[3],"wait_for":["b1"]}
`
	if err := os.WriteFile(path, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "--trace", path, "--format", "agentic-mooncake", "--policies", "kv",
		"--concurrency", "1", "--seeds", "1", "--warmup", "0s", "--window", "1m"}, &stdout, &stderr)
	// Named by its file, as every error of a trace's file is (the file
	// that holds the cycle, where the trace is a directory of them).
	if err == nil || !strings.Contains(err.Error(), "form a cycle") || !strings.Contains(err.Error(), filepath.Base(path)) {
		t.Fatalf("replay of a trace whose parents form a cycle: %v, want an error naming the trace's file and the cycle", err)
	}
	if strings.Contains(stderr.String(), "loaded") {
		t.Errorf("the trace was reported loaded before it was refused: %q", stderr.String())
	}
}

// Values the engines would silently replace with their defaults, or that
// compare as in range when they are not (NaN), and outputs that cannot be
// written, are refused by the flag's name before anything runs.
func TestReplayRefusesOutOfRangeValues(t *testing.T) {
	expectRefused(t, []string{"replay", "--trace", smallTrace, "--format", "weka", "--policies", "kv"}, []refusal{
		{"--workers 0", "--workers"}, {"--block-size -64", "--block-size"}, {"--gpu-blocks -5", "--gpu-blocks"},
		{"--max-model-len -1", "--max-model-len"}, {"--pool-tp 0", "--pool-tp"}, {"--session-cap 0", "--session-cap"},
		{"--speedup 0", "--speedup"}, {"--speedup +Inf", "--speedup"}, {"--pool-bandwidth NaN", "--pool-bandwidth"},
		{"--max-gap -1s", "--max-gap"}, {"--warmup 100000h", "--warmup"},
		{"--label x --policies kv,round_robin", "--label"}, {"--host-kv NaNx", "--host-kv"}, {"--host-kv 1e-9x", "--host-kv"},
		{"--host-kv 1e30x", "--host-kv"}, {"--host-kv 99999999999999999999", "--host-kv"},
		{"--json /no-such-directory/r.json", "--json"}, {"--plot .", "--plot"},
		{"--concurrency 2,1,2", "--concurrency"}, {"--policies kv,round_robin,kv", "--policies"},
		{"--hints-disabled prefetch_on_resume", "--hints"}, {"--workers 5000", "--workers"}, {"--scheduler-replicas 65", "--scheduler-replicas"}, {"--concurrency 2000000", "--concurrency"}, {"--pause-threshold NaN --policies session_aware", "--pause-threshold NaN: must be a finite number"}, {"--tick -1s", "--tick -1s: must be positive"}, {"--idle-ttl -1s", "--idle-ttl -1s: must not be negative"},
	})
}

// refusal is a command line's flags and what its error must name.
type refusal struct{ flags, want string }

// expectRefused runs base with each refusal's flags after it and wants an
// error that names what the refusal says.
func expectRefused(t *testing.T, base []string, refusals []refusal) {
	t.Helper()
	for _, r := range refusals {
		args := append(slices.Clone(base), strings.Fields(r.flags)...)
		if err := runErr(args...); err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: %v, want an error naming %s", r.flags, err, r.want)
		}
	}
}

// A staleness without replicas to be stale about is refused by name, not run
// as one scheduler.
func TestReplaySyncDelayNeedsReplicas(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "--trace", smallTrace, "--format", "weka", "--sync-delay", "100ms"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--scheduler-replicas") {
		t.Fatalf("replay --sync-delay without replicas: %v, want an error naming --scheduler-replicas", err)
	}
}

// An output path is checked without truncating or leaving anything: an
// existing file (or /dev/stdout) is opened for writing, a new one's
// directory is tried.
func TestCheckOutputs(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "kept.json")
	if err := os.WriteFile(existing, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkOutputs([2]string{"--json", existing}, [2]string{"--plot", filepath.Join(dir, "new.svg")}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Fatalf("the existing file was changed: %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the check left %d files", len(entries))
	}
	for _, bad := range []string{dir, filepath.Join(dir, "missing", "r.json")} {
		if err := checkOutputs([2]string{"--json", bad}); err == nil || !strings.Contains(err.Error(), "--json") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// An interrupt ends the runs left and is said once, with how far it got;
// the aborted runs are not counted done.
func TestReplayInterruptedSaysHowFarOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"replay", "--trace", smallTrace, "--format", "weka", "--concurrency", "1,2", "--workers", "2",
		"--seeds", "2", "--warmup", "1m", "--window", "5m", "--policies", "kv"}, &stdout, &stderr)
	if err == nil || err.Error() != "replay: interrupted after 0 of 4 runs" {
		t.Fatalf("an interrupted replay: %v", err)
	}
	if strings.Contains(stderr.String(), "4/4 runs") {
		t.Errorf("the progress line counts the aborted runs done: %q", stderr.String())
	}
}

// Runs of different traces merged are said to be: the merged file, table
// and plot name only the first's trace.
func TestMergeSaysTheTracesDiffer(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, tr := range []string{"a.json", "b.jsonl"} {
		f := filepath.Join(dir, fmt.Sprint(i)+".json")
		rows := []replay.Row{{Policy: fmt.Sprint("p", i), Concurrency: 1}}
		if err := writeJSON(f, runFile{Trace: tr, Config: map[string]any{"workers": 2}, Rows: rows}); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--merge", strings.Join(files, ",")}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "replays b.jsonl") {
		t.Errorf("merging two traces' runs said %q", stderr.String())
	}
}
