package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"switchyard.dev/pkg/replay"
)

// A report renders from replay --json files: tables, gains, verdicts,
// tuning scores and checks, the same bytes twice; a broken claim stops it.
func TestReportRenders(t *testing.T) {
	dir := t.TempDir()
	test, kv, v1, v2 := filepath.Join(dir, "test.json"), filepath.Join(dir, "kv.json"), filepath.Join(dir, "v1.json"), filepath.Join(dir, "v2.json")
	replaySmall(t, "5m", "--quiet", "--json", test, "--policies", "round_robin,kv,session_aware,oracle")
	replaySmall(t, "5m", "--quiet", "--json", kv, "--policies", "kv")
	replaySmall(t, "5m", "--quiet", "--json", v1, "--policies", "session_aware", "--label", "session_aware/a")
	replaySmall(t, "5m", "--quiet", "--json", v2, "--policies", "session_aware", "--label", "session_aware/b", "--acting-token-weight", "1")
	tune := filepath.Join(dir, "tune.json")
	mustRun(t, "replay", "--merge", kv+","+v1+","+v2, "--json", tune)
	tmpl := filepath.Join(dir, "r.md.tmpl")
	body := `# r
{{ table "test" "kv" }}
{{ workingSets "test" "kv" }}
{{ hitsAt "test" 1 }}
{{ tuning "tune" "session_aware/" "kv" }}
best {{ best "session_aware/" "kv" "tune" }}
gain {{ gain "test" "session_aware" "kv" 2 }}; session_aware is {{ verdict "test" "session_aware" "kv" 2 }} kv
{{ tuneVsTest "tune" "test" "kv" "session_aware/a" "session_aware" }}
oracle violations: {{ len (oracleChecks "test") }}; windows {{ windows "test" }}; workers {{ config "test" "workers" }}
{{ with row "test" "kv" 1 }}{{ f1 .TurnsPerMin }} {{ mtok .KVCapacityTokens }}{{ end }}
gainPct {{ printf "%.1f" (gainPct "test" "oracle" "kv" 2) }} leaning {{ leaning "test" "oracle" "kv" 2 }}
notTiedWith [{{ join (notTiedWith "tune" "session_aware/" "session_aware/a") "," }}] notAheadOf [{{ join (notAheadOf "test" "oracle" 2) "," }}]
aheadOf [{{ join (aheadOf "test" "kv") "," }}] same {{ sameRows "test" "kv" "kv" }} gap {{ printf "%.1f" (maxGainGap "tune" "session_aware/a" "test" "session_aware" "kv") }}
`
	if err := os.WriteFile(tmpl, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	render := func(tmplPath string) (string, error) {
		out, svg := filepath.Join(dir, "r.md"), filepath.Join(dir, "r.svg")
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"replay", "report", "--template", tmplPath, "--out", out, "--plot", "test=" + svg,
			"test=" + test, "tune=" + tune}, &stdout, &stderr)
		if err != nil {
			return "", err
		}
		b, _ := os.ReadFile(out)
		return string(b), nil
	}
	a, err := render(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	b, err := render(tmpl)
	if err != nil || a != b {
		t.Fatalf("a second rendering differs (%v)", err)
	}
	for _, want := range []string{"| session_aware | 2 |", "| kv | 1 |", "best session_aware/", "windows [300]", "workers 2",
		"| session_aware | tune (session_aware/a) |", "| routed ideal |", "same true", "notAheadOf [", "gainPct "} {
		if !strings.Contains(a, want) {
			t.Errorf("report lacks %q:\n%s", want, a)
		}
	}
	bad := filepath.Join(dir, "bad.tmpl")
	if err := os.WriteFile(bad, []byte(`{{ require false "a claim no longer holds" }}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := render(bad); err == nil || !strings.Contains(err.Error(), "a claim no longer holds") {
		t.Fatalf("require false rendered: %v", err)
	}
	if _, err := render(filepath.Join(dir, "missing.tmpl")); err == nil {
		t.Fatal("a missing template rendered")
	}
}

// A base that finished no turn at a level gives no ratio there: scoring
// against it is refused by name instead of a NaN that loses to every
// variant (and best then reporting that none exists). A variant that
// finished none where the base did scores 0 and ranks last.
func TestScoreRefusesALevelWithoutTurns(t *testing.T) {
	r := &report{data: map[string]runFile{"tune": {Rows: []replay.Row{
		{Policy: "kv", Concurrency: 1, TurnsPerMin: 10}, {Policy: "session_aware/a", Concurrency: 1, TurnsPerMin: 11},
		{Policy: "session_aware/b", Concurrency: 1, TurnsPerMin: 12},
		{Policy: "kv", Concurrency: 4, TurnsPerMin: 20}, {Policy: "session_aware/a", Concurrency: 4, TurnsPerMin: 21},
		{Policy: "session_aware/b", Concurrency: 4, TurnsPerMin: 0},
	}}}}
	if best, err := r.best("session_aware/", "kv", "tune"); err != nil || best != "session_aware/a" {
		t.Fatalf("best with a variant that finished nothing at a level: %q, %v; want session_aware/a", best, err)
	}
	r.data["tune"].Rows[3].TurnsPerMin = 0 // the base at CC4
	if _, err := r.score("tune", "session_aware/a", "kv"); err == nil || !strings.Contains(err.Error(), "concurrency 4") {
		t.Fatalf("score over a level the base finished nothing at: %v, want an error naming the level", err)
	}
	if _, err := r.best("session_aware/", "kv", "tune"); err == nil || !strings.Contains(err.Error(), "base kv") {
		t.Fatalf("best over a level the base finished nothing at: %v, want the score's error", err)
	}
}

// A report's plot is titled by the trace format its replay ran with, as the
// file's command records it (replay's default, weka, when it names none).
func TestRecordedFormat(t *testing.T) {
	for cmd, want := range map[string]string{
		"switchyard replay --trace t --format mooncake --workers 4": "Mooncake trace",
		"switchyard replay --trace t --format=agentic_mooncake":     "agentic Mooncake trace",
		"switchyard replay --trace t -format dynamo":                "Dynamo request trace",
		"switchyard replay --trace t --workers 4":                   "Weka Claude Code sessions",
		"switchyard replay --trace format --format weka --seeds 3":  "Weka Claude Code sessions",
	} {
		if got := recordedFormat(cmd).Describe(); got != want {
			t.Errorf("%q: %q, want %q", cmd, got, want)
		}
	}
}
