package servicekit

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// Main is the whole body of a service binary's main: it handles the `healthcheck`
// and `certs` subcommands (see HealthcheckCommand, CertsCommand), otherwise calls run with a context cancelled on
// SIGINT or SIGTERM and the command-line arguments (without the program name), and
// exits once: 0 on success or -h, 2 on a usage error (from ParseFlags or EnvFlags), 1
// on any other error, printed as "<name>: <error>".
func Main(name string, run func(ctx context.Context, args []string) error) {
	os.Exit(mainStatus(name, os.Args[1:], os.Stderr, run))
}

func mainStatus(name string, args []string, stderr io.Writer, run func(context.Context, []string) error) int {
	if len(args) > 0 && args[0] == "healthcheck" {
		return HealthcheckCommand(name, args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "certs" {
		return CertsCommand(name, args[1:], os.Stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, args)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case IsUsage(err):
		// The flag package already printed the problem and the usage.
		return 2
	default:
		// Many errors already begin with the service's name; say it once.
		msg := strings.TrimPrefix(err.Error(), name+": ")
		fmt.Fprintf(stderr, "%s: %s\n", name, msg)
		return 1
	}
}

// HealthcheckCommand runs `<binary> healthcheck [--addr host:port]`, what container
// healthchecks exec: exit status 0 if the gRPC health service at addr answers SERVING,
// 1 otherwise. It speaks plaintext, so the address defaults to the service's
// plaintext health port, SWITCHYARD_HEALTH_ADDR (--health-addr: a service under
// mutual TLS has one), else SWITCHYARD_GRPC_ADDR, else the service's default gRPC
// port (Ports), on this host.
func HealthcheckCommand(name string, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(name+" healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := cmp.Or(os.Getenv(EnvName("health-addr")), os.Getenv(EnvName("grpc-addr")), LocalAddr(name))
	addr := fs.String("addr", def, "gRPC address of the service to check")
	if status, done := parseCommand(fs, args, "addr"); done {
		return status
	}
	if err := Healthcheck(*addr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// parseCommand parses a subcommand's command line (fs writes to its stderr),
// every flag named in required set to something. done is true when the
// command ends here, with its exit status: 0 after -h, 2 for a bad command
// line (said on stderr).
func parseCommand(fs *flag.FlagSet, args []string, required ...string) (status int, done bool) {
	if err := ParseBriefly(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if strayWord(fs) != nil {
		return 2, true
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			fmt.Fprintf(fs.Output(), "%s: --%s is required\n", fs.Name(), name)
			return 2, true
		}
	}
	return 0, false
}

// Run serves srv and runs the service's background loops until ctx is done or one of
// them fails; a failure cancels the others. It returns once everything has stopped,
// with every error but the cancellation itself. A loop that returns nil early (nothing
// to do) stops nothing.
//
// The loops' ctx ends when the server's shutdown begins, while in-flight calls are
// still draining: a loop that advertises the service (registration, heartbeats)
// stops at once. So a loop must not close what in-flight calls use when it returns;
// clients to peers are closed by OnShutdown hooks, after the drain. A loop that
// in-flight calls depend on keeps going on a context of its own until they are done
// (the engine shim's step loop does).
func Run(ctx context.Context, srv *Server, loops ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	start := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f(ctx)
			if err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
				return
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			cancel()
		}()
	}
	start(srv.Serve)
	for _, f := range loops {
		if f != nil {
			start(f)
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
