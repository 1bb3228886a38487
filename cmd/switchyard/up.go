package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"text/tabwriter"

	"switchyard.dev/internal/mesh"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/services/scheduler"
	"switchyard.dev/services/servicekit"
)

// up runs the whole mesh in this process until ctx ends.
func up(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, level, err := upConfig(args, stderr)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	shutdown, err := servicekit.SetupTelemetry(ctx, "switchyard")
	if err != nil {
		return err
	}
	defer shutdown(context.WithoutCancel(ctx))

	m, err := mesh.Start(ctx, cfg)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled):
		// Ctrl-C before the mesh was ready: what was asked for, not a
		// failure (Start has stopped what it started).
		fmt.Fprintln(stdout, "stopped before the mesh was ready")
		return nil
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w (another switchyard up? --frontend-addr 127.0.0.1:0 picks a free port)", err)
	case err != nil:
		return err
	}
	certs := ""
	if m.CA != nil {
		// The operator's certificate, for grpcurl: files that live as long
		// as this mesh.
		if certs, err = writeAdminCerts(m.CA); err != nil {
			return err // the mesh stops with the process
		}
	}
	printEndpoints(stdout, m, certs)
	<-ctx.Done()
	if certs != "" {
		// Before the drain: a second Ctrl-C quits without running defers.
		os.RemoveAll(certs)
	}
	fmt.Fprintln(stdout, "\nstopping… (Ctrl-C again quits at once)")
	if err := m.Wait(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "stopped")
	return nil
}

// upConfig parses up's flags (and their SWITCHYARD_* variables) into the
// mesh's configuration and the services' log level.
func upConfig(args []string, stderr io.Writer) (mesh.Config, slog.Level, error) {
	cfg := mesh.DefaultConfig()
	fs := flag.NewFlagSet("switchyard up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "simulated GPU workers")
	fs.IntVar(&cfg.Schedulers, "schedulers", 1, "scheduler replicas, all active: each owns the sessions that hash to it and they share the fleet's admission (docs/scale-out.md)")
	fs.IntVar(&cfg.Frontends, "frontends", 1, "frontend replicas; the first listens on --frontend-addr, the others on free ports (any serves any turn)")
	fs.IntVar(&cfg.FlashIndexers, "flash-indexers", 0, "flash indexer replicas the schedulers spread lookups over; 0 = 2 if --schedulers or --frontends run replicas, as compose does, else 1")
	fs.StringVar(&cfg.FrontendHTTPAddr, "frontend-addr", cfg.FrontendHTTPAddr, "listen address of the inference APIs")
	fs.StringVar(&cfg.Host, "host", cfg.Host, "interface the internal services listen on (free ports)")
	fs.StringVar(&cfg.Policy, "policy", cfg.Policy, "routing policy (round_robin, least_loaded, kv, kv_affinity, session_aware); empty for the scheduler's default")
	fs.IntVar(&cfg.GPUBlocks, "gpu-blocks", cfg.GPUBlocks, "KV cache blocks per simulated worker; 0 for the engine default")
	fs.IntVar(&cfg.PoolPages, "pool-pages", cfg.PoolPages, "start a shared KV pool (kv-pool) of this many pages for every simulated worker; 0 = none")
	fs.Float64Var(&cfg.SpeedUp, "speedup", cfg.SpeedUp, "simulated engines run this many times faster than the modelled GPU")
	fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "longest wait for every worker to be registered and indexed")
	fs.Func("model-aliases", "comma-separated other model names the frontend accepts for the served one (a harness's own, e.g. claude-sonnet-4-5); any other model is a 404", func(v string) error {
		cfg.ModelAliases = append(cfg.ModelAliases, servicekit.SplitList(v)...)
		return nil
	})
	fs.BoolVar(&cfg.Secure, "secure", cfg.Secure, "run the mesh on mutual TLS with a throwaway CA held in memory (the operator's certificate for grpcurl is written to a temporary folder, printed)")
	fs.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof, "every service serves the Go profiles at /debug/pprof/ on its HTTP port (operators only: with --secure an admin certificate); one process, so each profile is the whole mesh's, labelled service=<name>")
	fs.BoolVar(&cfg.SimToolCalls, "sim-tool-calls", cfg.SimToolCalls, "simulated engines answer a user message that declares tools with a call of the first tool, so agent harnesses run tool-using turns")
	fs.BoolVar(&cfg.ServerTiming, "server-timing", cfg.ServerTiming, "answers carry Server-Timing (a header; a trailer when streamed): the routing decision (admission's wait included), the engine's own time and the frontend's total, in ms")
	level := slog.LevelWarn
	fs.TextVar(&level, "log-level", level, "log level of the services: DEBUG, INFO, WARN or ERROR")
	// Admission's knobs, with the scheduler's names and defaults
	// (docs/admission.md); they configure session_aware only.
	ad := scheduler.DefaultConfig().Admission
	ad.RegisterFlags(fs, "session_aware: ")
	if err := servicekit.ParseFlags(fs, args); err != nil {
		return cfg, level, usageError(err)
	}
	if err := checkUpConfig(cfg); err != nil {
		fmt.Fprintf(stderr, "switchyard up: %v\n", err)
		return cfg, level, errUsage
	}
	if cfg.FlashIndexers == 0 {
		cfg.FlashIndexers = 1
		if cfg.Schedulers > 1 || cfg.Frontends > 1 {
			cfg.FlashIndexers = 2 // a replicated mesh, as compose and the chart run it
		}
	}
	if err := ad.Validate(); err != nil {
		return cfg, level, err
	}
	cfg.Scheduler = func(c *scheduler.Config) { c.Admission = ad }
	return cfg, level, nil
}

// checkUpConfig refuses values the mesh would otherwise replace by its
// defaults without a word (--workers 0 ran four), and a non-loopback --host
// without --secure, which every service would refuse, naming serve's flags.
func checkUpConfig(cfg mesh.Config) error {
	for _, c := range []struct {
		flag string
		n    int
		min  int
	}{
		{"--workers", cfg.Workers, 1},
		{"--schedulers", cfg.Schedulers, 1},
		{"--frontends", cfg.Frontends, 1},
		{"--flash-indexers", cfg.FlashIndexers, 0},
		{"--gpu-blocks", cfg.GPUBlocks, 0},
		{"--pool-pages", cfg.PoolPages, 0},
	} {
		if c.n < c.min {
			return fmt.Errorf("%s %d: want at least %d", c.flag, c.n, c.min)
		}
	}
	if !(cfg.SpeedUp > 0) {
		return fmt.Errorf("--speedup %v: want a positive factor", cfg.SpeedUp)
	}
	if cfg.ReadyTimeout <= 0 {
		return fmt.Errorf("--ready-timeout %v: want a positive duration", cfg.ReadyTimeout)
	}
	if !cfg.Secure && cfg.Host != "" && !servicekit.IsLoopback(net.JoinHostPort(cfg.Host, "0")) {
		return fmt.Errorf("--host %s is not a loopback address: the mesh's services would listen there in plaintext; add --secure (mutual TLS)", cfg.Host)
	}
	return nil
}

func printEndpoints(w io.Writer, m *mesh.Mesh, certs string) {
	front := m.Endpoint("frontend")
	base := "http://" + mesh.DialAddr(front.HTTP)
	mode := "plaintext on loopback"
	if certs != "" {
		mode = "mutual TLS between services"
	}
	if !servicekit.IsLoopback(front.HTTP) {
		// The inference APIs are plaintext in either mode (API keys, not
		// certificates, are theirs), and up gives them no keys.
		mode += "; the inference APIs listen beyond loopback, in plaintext and without API keys"
	}
	fmt.Fprintf(w, "Switchyard is up: %d simulated workers behind %s (%s)\n\n", count(m, "engine-shim"), base, mode)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tNAME\tgRPC\tHTTP")
	scheme := "http"
	if certs != "" {
		scheme = "https"
	}
	for _, ep := range m.Endpoints {
		s := scheme
		if ep.Service == "frontend" {
			s = "http" // the public APIs: API keys, not certificates
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s://%s\n", ep.Service, ep.Name, mesh.DialAddr(ep.GRPC), s, mesh.DialAddr(ep.HTTP))
	}
	tw.Flush()
	sched := mesh.DialAddr(m.Endpoint("scheduler").GRPC)
	schedHTTP := mesh.DialAddr(m.Endpoint("scheduler").HTTP)
	grpcurl := "grpcurl -plaintext " + sched
	curl := "curl -s http://" + schedHTTP + "/v1/workers"
	if certs != "" {
		tlsFlags := fmt.Sprintf("-cacert %[1]s/ca.crt -cert %[1]s/admin.crt -key %[1]s/admin.key", certs)
		grpcurl = "grpcurl " + tlsFlags + " " + sched
		curl = fmt.Sprintf("curl -s --cacert %[1]s/ca.crt --cert %[1]s/admin.crt --key %[1]s/admin.key https://%[2]s/v1/workers", certs, schedHTTP)
	}
	fmt.Fprintf(w, `
Send one turn of a session (run it twice: the second lands on the same worker,
X-Switchyard-Worker, and reports usage.prompt_tokens_details.cached_tokens > 0):

  curl -si %s/v1/chat/completions \
    -H 'content-type: application/json' \
    -H 'x-dynamo-session-id: demo-session' \
    -d '{"model":"switchyard-sim","max_tokens":32,"messages":[{"role":"user","content":"Explain what a KV cache is, briefly."}]}'

Look inside: %s list
             %s switchyard.scheduler.v1.SchedulerService/ListWorkers
             %s

%sCtrl-C stops everything.
`, base, grpcurl, grpcurl, curl, noAdmission(m.Policy))
}

// noAdmission says, for a policy without admission control, what that
// leaves off (nothing for one with it).
func noAdmission(p routing.Policy) string {
	if p.Admits() {
		return ""
	}
	return fmt.Sprintf(`Policy %s runs no admission control, so there is no program table: the hint
emitter sends no KV hints and the console shows no admission decisions
(--policy session_aware turns both on).

`, p)
}

// count counts the mesh's replicas of a service.
func count(m *mesh.Mesh, service string) int {
	n := 0
	for _, ep := range m.Endpoints {
		if ep.Service == service {
			n++
		}
	}
	return n
}

// writeAdminCerts writes the CA and an operator (admin) certificate of ca to
// a new temporary folder and returns it.
func writeAdminCerts(ca *servicekit.DevCA) (string, error) {
	dir, err := os.MkdirTemp("", "switchyard-up-certs-")
	if err != nil {
		return "", err
	}
	certPEM, keyPEM, err := ca.Issue(servicekit.Identity{Service: servicekit.AdminIdentity})
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	for name, data := range map[string][]byte{"ca.crt": ca.CertPEM, "admin.crt": certPEM, "admin.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}
