package faultsuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// repoRoot is where go.work is, relative to this package (go test runs
// in the package's directory).
const repoRoot = "../.."

// Binary returns the switchyard binary to run: $FAULTS_BIN (what
// scripts/faults.sh builds into bin/; relative to the repository root), else
// one built now into dir.
func Binary(t testing.TB, dir string) string {
	t.Helper()
	if b := os.Getenv("FAULTS_BIN"); b != "" {
		if !filepath.IsAbs(b) {
			b = filepath.Join(repoRoot, b)
		}
		abs, err := filepath.Abs(b)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	out := filepath.Join(dir, "switchyard")
	cmd := exec.Command("go", "build", "-o", out, "switchyard.dev/cmd/switchyard")
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/switchyard: %v\n%s", err, b)
	}
	return out
}

// LogDir is where the processes' logs go: $FAULTS_LOGS, else a new
// temporary directory that is kept (its path is logged) for reading after
// the run.
func LogDir(t testing.TB, name string) string {
	t.Helper()
	if d := os.Getenv("FAULTS_LOGS"); d != "" {
		d = filepath.Join(d, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "switchyard-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Fixture is a running mesh of processes, its clients and its load.
type Fixture struct {
	T       testing.TB
	Ctx     context.Context
	Mesh    *Mesh
	Client  *Client
	Clients *Clients
	Proxy   *Proxy // in front of ProxiedWorker's shim, nil if none

	ProxiedWorker string
	probes        atomic.Int64
}

// FixtureConfig says what to start.
type FixtureConfig struct {
	Name    string // log directory name
	Workers int
	// ProxiedWorker, when set, is the shim that a partition Proxy fronts.
	ProxiedWorker string
	Extra         map[string][]string
	// Concurrency sizes the client's connection pool.
	Concurrency int
	// Replicas (MeshConfig's).
	Schedulers, Frontends, FlashIndexers int
}

// StartFixture starts the mesh and stops it when the test ends, printing
// the end of every log if the test failed.
func StartFixture(t *testing.T, ctx context.Context, cfg FixtureConfig) *Fixture {
	t.Helper()
	dir := LogDir(t, cfg.Name)
	t.Logf("process logs: %s", dir)
	bin := Binary(t, t.TempDir())
	f := &Fixture{T: t, Ctx: ctx, ProxiedWorker: cfg.ProxiedWorker}
	mc := MeshConfig{Bin: bin, Dir: dir, Workers: cfg.Workers, Extra: cfg.Extra,
		Schedulers: cfg.Schedulers, Frontends: cfg.Frontends, FlashIndexers: cfg.FlashIndexers}
	if cfg.ProxiedWorker != "" {
		p, err := NewProxy()
		if err != nil {
			t.Fatal(err)
		}
		f.Proxy = p
		mc.Advertise = map[string]string{cfg.ProxiedWorker: p.Addr()}
	}
	m, err := NewMesh(mc)
	if err != nil {
		t.Fatal(err)
	}
	f.Mesh = m
	if f.Proxy != nil {
		f.Proxy.Serve(m.Proc(cfg.ProxiedWorker).GRPC)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last log lines of every process (full logs in %s):\n%s", dir, m.Tails(25))
		}
		m.Stop()
		if f.Proxy != nil {
			f.Proxy.Close()
		}
	})
	start := time.Now()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("mesh did not start: %v", err)
	}
	t.Logf("mesh of %d processes ready in %v", len(m.Procs), time.Since(start).Round(time.Millisecond))
	c, err := m.Clients()
	if err != nil {
		t.Fatal(err)
	}
	f.Clients = c
	f.Client = NewClient(m.Frontends(), max(cfg.Concurrency, 16))
	t.Cleanup(func() {
		c.Close()
		f.Client.Close()
	})
	return f
}

// Probe sends one short turn of a new session, in the background.
func (f *Fixture) Probe() {
	n := f.probes.Add(1)
	id := fmt.Sprintf("probe-%d-%d", time.Now().UnixNano(), n)
	go f.Client.Chat(f.Ctx, "probe", id, []Message{{Role: "user", Content: "Probe " + id + ": say hello."}}, 4)
}

// FirstHead waits, sending probes every 100 ms, for the first turn after
// `after` that got its first byte and matches keep; it returns when that
// happened, or the zero time and false past within.
func (f *Fixture) FirstHead(after time.Time, within time.Duration, keep func(*Turn) bool) (time.Time, bool) {
	deadline := time.Now().Add(within)
	for {
		var first time.Time
		for _, t := range f.Client.Rec.Turns(func(t *Turn) bool { return t.Head.After(after) && t.Status == 200 && keep(t) }) {
			if first.IsZero() || t.Head.Before(first) {
				first = t.Head
			}
		}
		if !first.IsZero() {
			return first, true
		}
		if time.Now().After(deadline) || f.Ctx.Err() != nil {
			return time.Time{}, false
		}
		f.Probe()
		time.Sleep(100 * time.Millisecond)
	}
}

// FirstOn is FirstHead for a turn served by worker.
func (f *Fixture) FirstOn(worker string, after time.Time, within time.Duration) (time.Time, bool) {
	return f.FirstHead(after, within, func(t *Turn) bool { return t.Worker == worker })
}

// Quiesce waits until no turn that started before `before` is in flight
// (each is bounded by the client's timeout).
func (f *Fixture) Quiesce(before time.Time) {
	deadline := time.Now().Add(f.Client.Timeout + 5*time.Second)
	for time.Now().Before(deadline) {
		if len(f.Client.Rec.Turns(func(t *Turn) bool { return t.End.IsZero() && t.Start.Before(before) })) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Settle waits until the mesh is whole again and a turn succeeds.
func (f *Fixture) Settle(d time.Duration) error {
	if err := f.Mesh.WaitReady(f.Ctx, d); err != nil {
		return err
	}
	if _, ok := f.FirstHead(time.Now(), d, func(*Turn) bool { return true }); !ok {
		return fmt.Errorf("no turn succeeded within %v", d)
	}
	return nil
}

// Since is a duration from t0 to t, or -1 if t is zero.
func Since(t0, t time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return t.Sub(t0)
}

// Errors lists up to n distinct errors of the turns.
func Errors(turns []Turn, n int) []string {
	var out, seen []string
	for _, t := range turns {
		if t.Err == "" || slices.Contains(seen, t.Err) || len(out) >= n {
			continue
		}
		seen = append(seen, t.Err)
		out = append(out, fmt.Sprintf("%s turn of %s (worker %q, %s after its start): %s", t.Kind, t.Session, t.Worker,
			t.End.Sub(t.Start).Round(time.Millisecond), t.Err))
	}
	return out
}
