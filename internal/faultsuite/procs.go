package faultsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// Proc is one service process, restartable on the same ports.
type Proc struct {
	Service string // "scheduler", "engine-shim", ...
	ID      string // the worker id for shims, else the service name
	GRPC    string // 127.0.0.1:port
	HTTP    string
	Args    []string // flags after `serve <service>`
	Log     string   // its log file (every run appends)

	bin string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current run has ended
	starts int
}

// Start runs the process (again). It returns once it is started, not ready.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			return fmt.Errorf("%s: already running (pid %d)", p.ID, p.cmd.Process.Pid)
		}
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if p.starts == 0 {
		flags |= os.O_TRUNC // a directory reused from an earlier run
	}
	f, err := os.OpenFile(p.Log, flags, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "=== faultsuite: start #%d at %s: %s serve %s %s\n", p.starts, time.Now().Format(time.RFC3339Nano),
		p.bin, p.Service, strings.Join(p.Args, " "))
	cmd := exec.Command(p.bin, append([]string{"serve", p.Service}, p.Args...)...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a signal reaches it and nothing else; and
	// killed with this test process should that die without cleaning up
	// (Pdeathsig fires when the forking thread exits, which the Go runtime
	// only does for locked threads; none is locked here).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.ID, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== faultsuite: exited at %s: %v\n", time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	return nil
}

// cleanEnv is this process's environment without SWITCHYARD_* variables:
// every setting the suite means is a flag.
func cleanEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SWITCHYARD_") })
}

// Pid is the current run's pid (0 if never started).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the current run has not ended.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process's group.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not started", p.ID)
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Wait waits for the current run to end, at most d.
func (p *Proc) Wait(d time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(d):
		return fmt.Errorf("%s: still running after %v", p.ID, d)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() error {
	if !p.Running() {
		return nil
	}
	// A stopped process dies of SIGKILL too; SIGCONT first is not needed.
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return p.Wait(10 * time.Second)
}

// Tail returns the last n lines of the process's log.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Mesh is the whole fleet of processes.
type Mesh struct {
	Dir     string // logs
	Workers int
	Procs   []*Proc // start order: scheduler, indexers, emitter, shims, frontend

	// ShimAdvertise, when set, gives a shim the address it advertises
	// instead of its own (a proxy in front of it).
	shimAdvertise map[string]string
}

// MeshConfig says what to run.
type MeshConfig struct {
	Bin     string // the switchyard binary
	Dir     string // where logs go
	Workers int
	// Schedulers, Frontends and FlashIndexers are how many replicas of
	// each run (1 when ≤ 0); one is named for its service, several
	// "<service>-<i>".
	Schedulers, Frontends, FlashIndexers int
	// Advertise maps a worker id to the address its shim advertises (a
	// proxy the suite puts in front of it); the shim listens on its own.
	Advertise map[string]string
	// Extra flags per service name ("engine-shim" for every shim, "*" for
	// every service), after the suite's own (a flag given twice: the last
	// wins).
	Extra map[string][]string
}

// NewMesh assigns free loopback ports and the flags that wire the services
// (what docker-compose.yml does with SWITCHYARD_* variables). Nothing starts.
func NewMesh(cfg MeshConfig) (*Mesh, error) {
	m := &Mesh{Dir: cfg.Dir, Workers: cfg.Workers, shimAdvertise: cfg.Advertise}
	// Every port stays held until all are assigned: a port released at once
	// may be handed out again by the next call (a frontend once got the same
	// port for gRPC and HTTP and could not start).
	var held portHolder
	defer held.release()
	var err error // the first port that could not be had; add does nothing after it
	add := func(service, id string) *Proc {
		var g, h string
		if err == nil {
			g, err = held.take()
		}
		if err == nil {
			h, err = held.take()
		}
		if err != nil {
			return nil
		}
		p := &Proc{Service: service, ID: id, GRPC: g, HTTP: h, bin: cfg.Bin, Log: filepath.Join(cfg.Dir, id+".log")}
		m.Procs = append(m.Procs, p)
		return p
	}
	replicas := func(n int, service string) []*Proc {
		if n <= 1 {
			return []*Proc{add(service, service)}
		}
		out := make([]*Proc, n)
		for i := range out {
			out[i] = add(service, fmt.Sprintf("%s-%d", service, i))
		}
		return out
	}
	scheds := replicas(cfg.Schedulers, "scheduler")
	flashes := replicas(cfg.FlashIndexers, "flash-indexer")
	spi := add("session-prefix-indexer", "session-prefix-indexer")
	emitter := add("kvhint-emitter", "kvhint-emitter")
	var shims []*Proc
	for i := range cfg.Workers {
		shims = append(shims, add("engine-shim", WorkerID(i)))
	}
	fronts := replicas(cfg.Frontends, "frontend")
	if err != nil {
		return nil, err
	}
	list := func(ps []*Proc) string {
		var a []string
		for _, p := range ps {
			a = append(a, p.GRPC)
		}
		return strings.Join(a, ",")
	}
	schedList, flashList := list(scheds), list(flashes)
	base := func(p *Proc) []string {
		return []string{"--grpc-addr", p.GRPC, "--http-addr", p.HTTP, "--log-level", "INFO"}
	}
	for _, sched := range scheds {
		sched.Args = append(base(sched), "--flash-indexer-addr", flashList)
		if len(scheds) > 1 {
			sched.Args = append(sched.Args, "--peer-addrs", schedList)
		}
	}
	for _, flash := range flashes {
		flash.Args = append(base(flash), "--scheduler-addr", schedList)
	}
	spi.Args = append(base(spi), "--scheduler-addr", schedList)
	emitter.Args = append(base(emitter), "--scheduler-addr", schedList, "--session-indexer-addr", spi.GRPC)
	for i, p := range shims {
		adv := p.GRPC
		if a := cfg.Advertise[p.ID]; a != "" {
			adv = a
		}
		p.Args = append(base(p), "--worker-id", p.ID, "--scheduler-addr", schedList,
			"--advertise-addr", adv, "--seed", strconv.Itoa(i+1))
	}
	for _, front := range fronts {
		front.Args = append(base(front), "--scheduler-addr", schedList)
	}
	for _, p := range m.Procs {
		p.Args = append(p.Args, cfg.Extra["*"]...)
		p.Args = append(p.Args, cfg.Extra[p.Service]...)
	}
	return m, nil
}

// WorkerID names the i-th shim.
func WorkerID(i int) string { return fmt.Sprintf("worker-%d", i) }

// portHolder hands out distinct free loopback addresses, listening on each
// until release so that none is handed out twice.
type portHolder struct{ ls []net.Listener }

func (h *portHolder) take() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	h.ls = append(h.ls, l)
	return l.Addr().String(), nil
}

func (h *portHolder) release() {
	for _, l := range h.ls {
		l.Close()
	}
	h.ls = nil
}

// Proc returns the process with this id.
func (m *Mesh) Proc(id string) *Proc {
	for _, p := range m.Procs {
		if p.ID == id {
			return p
		}
	}
	panic("faultsuite: no process " + id)
}

// Frontend is the inference API's base URL (the first frontend's).
func (m *Mesh) Frontend() string { return m.Frontends()[0] }

// Frontends are every frontend's base URL.
func (m *Mesh) Frontends() []string { return m.urls("frontend") }

// urls are the HTTP base URLs of a service's replicas.
func (m *Mesh) urls(service string) []string {
	var out []string
	for _, p := range m.Procs {
		if p.Service == service {
			out = append(out, "http://"+p.HTTP)
		}
	}
	return out
}

// Replicas are a service's processes.
func (m *Mesh) Replicas(service string) []*Proc {
	var out []*Proc
	for _, p := range m.Procs {
		if p.Service == service {
			out = append(out, p)
		}
	}
	return out
}

// Start starts every process in order, each once its predecessors answer
// their health checks, and waits until the mesh is ready.
func (m *Mesh) Start(ctx context.Context) error {
	for _, p := range m.Procs {
		if err := p.Start(); err != nil {
			return err
		}
		if err := WaitServing(ctx, p, 30*time.Second); err != nil {
			return err
		}
	}
	return m.WaitReady(ctx, 60*time.Second)
}

// Stop stops every process, frontend first, with SIGTERM and then SIGKILL.
func (m *Mesh) Stop() {
	for i := len(m.Procs) - 1; i >= 0; i-- {
		p := m.Procs[i]
		if !p.Running() {
			continue
		}
		_ = p.Signal(syscall.SIGCONT) // a stopped process cannot drain
		_ = p.Signal(syscall.SIGTERM)
		if p.Wait(5*time.Second) != nil {
			_ = p.Kill()
		}
	}
}

// Tails is the end of every log, for a failure report.
func (m *Mesh) Tails(n int) string {
	var b strings.Builder
	for _, p := range m.Procs {
		if p.Pid() != 0 {
			fmt.Fprintf(&b, "----- %s (%s) -----\n%s\n", p.ID, p.Log, p.Tail(n))
		}
	}
	return b.String()
}

// WaitServing polls the process's gRPC health (what `switchyard serve <svc>
// healthcheck --addr` asks) until it is SERVING.
func WaitServing(ctx context.Context, p *Proc, d time.Duration) error {
	return poll(ctx, d, 20*time.Millisecond, func() error {
		if !p.Running() {
			return fmt.Errorf("%s exited:\n%s", p.ID, p.Tail(20))
		}
		return healthcheck(ctx, p.GRPC)
	})
}

func healthcheck(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := dialFast(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s: %s", addr, resp.GetStatus())
	}
	return nil
}

// WaitReady waits until every worker is registered with the scheduler and
// followed by the flash indexer, and the frontend answers /healthz.
func (m *Mesh) WaitReady(ctx context.Context, d time.Duration) error {
	c, err := m.Clients()
	if err != nil {
		return err
	}
	defer c.Close()
	return poll(ctx, d, 50*time.Millisecond, func() error {
		for i, sc := range c.Scheds {
			ws, err := sc.ListWorkers(ctx, &schedulerv1.ListWorkersRequest{})
			if err != nil {
				return err
			}
			if len(ws.GetWorkers()) < m.Workers {
				return fmt.Errorf("scheduler %d: %d of %d workers registered", i, len(ws.GetWorkers()), m.Workers)
			}
		}
		for i, fc := range c.Flashes {
			st, err := fc.GetStats(ctx, &flashindexv1.GetStatsRequest{})
			if err != nil {
				return err
			}
			if int(st.GetFollowedWorkers()) < m.Workers {
				return fmt.Errorf("flash indexer %d follows %d of %d workers", i, st.GetFollowedWorkers(), m.Workers)
			}
		}
		for _, u := range m.Frontends() {
			if err := getOK(ctx, u+"/healthz"); err != nil {
				return err
			}
		}
		return nil
	})
}

func getOK(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// poll calls f every interval until it returns nil, the deadline d passes
// (its last error is returned) or ctx ends.
func poll(ctx context.Context, d, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// Clients are gRPC clients of the scheduler and the flash indexer (the
// first replica of each), and of every replica.
type Clients struct {
	conns   []*grpc.ClientConn
	Sched   schedulerv1.SchedulerServiceClient
	Flash   flashindexv1.FlashIndexerServiceClient
	Scheds  []schedulerv1.SchedulerServiceClient
	Flashes []flashindexv1.FlashIndexerServiceClient
}

func (m *Mesh) Clients() (*Clients, error) {
	c := &Clients{}
	for _, p := range m.Procs {
		if p.Service != "scheduler" && p.Service != "flash-indexer" {
			continue
		}
		conn, err := dialFast(p.GRPC)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, conn)
		if p.Service == "scheduler" {
			c.Scheds = append(c.Scheds, schedulerv1.NewSchedulerServiceClient(conn))
		} else {
			c.Flashes = append(c.Flashes, flashindexv1.NewFlashIndexerServiceClient(conn))
		}
	}
	c.Sched, c.Flash = c.Scheds[0], c.Flashes[0]
	return c, nil
}

func (c *Clients) Close() {
	for _, conn := range c.conns {
		conn.Close()
	}
}

// dialFast connects to a service of the mesh and, when the connection
// breaks (the suite kills processes), reconnects every 20-100 ms instead of
// gRPC's default backoff from 1 s, so a poll sees a restarted service as soon
// as it listens rather than when the backoff ends.
func dialFast(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
}

// Workers lists the registered worker ids.
func (c *Clients) Workers(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.Sched.ListWorkers(ctx, &schedulerv1.ListWorkersRequest{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range resp.GetWorkers() {
		out = append(out, w.GetWorkerId())
	}
	slices.Sort(out)
	return out, nil
}

// Metric reads one sample of a Prometheus text exposition at url: the
// value of the first line whose name and labels start with series
// (`go_goroutines`, `x{worker="worker-1"}`); ok is false when absent.
func Metric(ctx context.Context, url, series string) (v float64, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	v, ok = parseMetric(body, series)
	return v, ok, nil
}

// parseMetric finds the sample of series: a metric name, a name with its
// full label set, or a name with the first labels of the set (`x{worker="w"`).
func parseMetric(body []byte, series string) (float64, bool) {
	open := strings.Contains(series, "{") && !strings.HasSuffix(series, "}")
	for line := range bytes.Lines(body) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		i := bytes.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		key := string(line[:i])
		if key != series && !(open && strings.HasPrefix(key, series)) {
			continue
		}
		v, err := strconv.ParseFloat(string(line[i+1:]), 64)
		if err != nil {
			continue
		}
		return v, true
	}
	return 0, false
}

// MetricSum adds every sample of the metric name (all label sets) at url.
func MetricSum(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return sumMetric(body, name), nil
}

func sumMetric(body []byte, name string) float64 {
	var sum float64
	for line := range bytes.Lines(body) {
		line = bytes.TrimSpace(line)
		rest, ok := bytes.CutPrefix(line, []byte(name))
		if !ok || len(rest) == 0 || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		i := bytes.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(string(line[i+1:]), 64); err == nil {
			sum += v
		}
	}
	return sum
}
