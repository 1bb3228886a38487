package servicekit

import (
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"grpc-addr":           "SWITCHYARD_GRPC_ADDR",
		"worker-id":           "SWITCHYARD_WORKER_ID",
		"scheduler.addr":      "SWITCHYARD_SCHEDULER_ADDR",
		"flash-indexer-addr":  "SWITCHYARD_FLASH_INDEXER_ADDR",
		"workers":             "SWITCHYARD_WORKERS",
		"already_underscored": "SWITCHYARD_ALREADY_UNDERSCORED",
	} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // value of --addr
		wantN   int    // value of --n
		wantErr bool
	}{
		{name: "default", want: "def", wantN: 1},
		{name: "env", env: map[string]string{"SWITCHYARD_ADDR": "env:1"}, want: "env:1", wantN: 1},
		{name: "command line wins", args: []string{"--addr", "cli:1"}, env: map[string]string{"SWITCHYARD_ADDR": "env:1"}, want: "cli:1", wantN: 1},
		{name: "empty env value is a value", env: map[string]string{"SWITCHYARD_ADDR": ""}, want: "", wantN: 1},
		{name: "typed flag", env: map[string]string{"SWITCHYARD_N": "7"}, want: "def", wantN: 7},
		{name: "bad env value", env: map[string]string{"SWITCHYARD_N": "seven"}, want: "def", wantN: 1, wantErr: true},
		{name: "other prefixes ignored", env: map[string]string{"ADDR": "x", "SWITCHYARDADDR": "y"}, want: "def", wantN: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			addr := fs.String("addr", "def", "")
			n := fs.Int("n", 1, "")
			err := ParseFlags(fs, tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseFlags: %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return // flag.Value.Set may have stored a partial value; Main exits anyway
			}
			if *addr != tc.want || *n != tc.wantN {
				t.Errorf("addr=%q n=%d, want addr=%q n=%d", *addr, *n, tc.want, tc.wantN)
			}
		})
	}
}

func TestOptionsFlags(t *testing.T) {
	t.Setenv("SWITCHYARD_GRPC_ADDR", ":9999")
	t.Setenv("SWITCHYARD_SHUTDOWN_TIMEOUT", "3s")
	t.Setenv("SWITCHYARD_SHUTDOWN_NOTICE", "250ms")
	t.Setenv("SWITCHYARD_LOG_LEVEL", "debug")
	opts := DefaultOptions("scheduler")
	if opts.GRPCAddr != ":9100" || opts.HTTPAddr != ":9101" || opts.ShutdownNotice != DefaultShutdownNotice {
		t.Fatalf("DefaultOptions(scheduler) = %+v", opts)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	opts.RegisterFlags(fs)
	if err := ParseFlags(fs, []string{"--http-addr="}); err != nil {
		t.Fatal(err)
	}
	if opts.GRPCAddr != ":9999" || opts.HTTPAddr != "" || opts.ShutdownTimeout != 3*time.Second || opts.ShutdownNotice != 250*time.Millisecond || opts.LogLevel.String() != "DEBUG" {
		t.Errorf("after flags+env: %+v", opts)
	}
}

func TestMainStatus(t *testing.T) {
	r := start(t, Options{})
	okRun := func(context.Context, []string) error { return nil }
	for _, tc := range []struct {
		name string
		args []string
		run  func(context.Context, []string) error
		want int
	}{
		{name: "ok", run: okRun, want: 0},
		{name: "error", run: func(context.Context, []string) error { return errors.New("bad") }, want: 1},
		{name: "help", run: func(context.Context, []string) error { return flag.ErrHelp }, want: 0},
		{name: "usage", run: func(_ context.Context, args []string) error {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			return ParseFlags(fs, args)
		}, args: []string{"--nope"}, want: 2},
		{name: "args passed", run: func(_ context.Context, args []string) error {
			if strings.Join(args, " ") != "a b" {
				return errors.New("wrong args")
			}
			return nil
		}, args: []string{"a", "b"}, want: 0},
		{name: "healthcheck serving", args: []string{"healthcheck", "--addr", r.srv.GRPCAddr()}, run: okRun, want: 0},
		{name: "healthcheck down", args: []string{"healthcheck", "--addr", "127.0.0.1:1"}, run: okRun, want: 1},
		{name: "healthcheck bad flag", args: []string{"healthcheck", "--nope"}, run: okRun, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mainStatus("test", tc.args, io.Discard, tc.run); got != tc.want {
				t.Errorf("exit status %d, want %d", got, tc.want)
			}
		})
	}
}

func TestHealthcheckDefaultAddr(t *testing.T) {
	r := start(t, Options{})
	t.Setenv("SWITCHYARD_GRPC_ADDR", r.srv.GRPCAddr())
	if got := HealthcheckCommand("scheduler", nil, io.Discard); got != 0 {
		t.Errorf("healthcheck with SWITCHYARD_GRPC_ADDR = %d, want 0", got)
	}
	// Under mutual TLS the gRPC port needs a certificate: the plaintext
	// health port, where one is set, is the one asked.
	t.Setenv("SWITCHYARD_GRPC_ADDR", "127.0.0.1:1")
	t.Setenv("SWITCHYARD_HEALTH_ADDR", r.srv.GRPCAddr())
	if got := HealthcheckCommand("scheduler", nil, io.Discard); got != 0 {
		t.Errorf("healthcheck with SWITCHYARD_HEALTH_ADDR = %d, want 0", got)
	}
}

// A subcommand without its required flag says so and exits 2; -h exits 0.
func TestSubcommandCommandLines(t *testing.T) {
	var stderr strings.Builder
	if got := CertsCommand("switchyard", nil, io.Discard, &stderr); got != 2 || !strings.Contains(stderr.String(), "switchyard certs: --out is required") {
		t.Errorf("certs without --out: %d %q", got, stderr.String())
	}
	if got := HealthcheckCommand("nobody", nil, io.Discard); got != 2 {
		t.Errorf("healthcheck of a service with no default address: %d, want 2", got)
	}
	if got := CertsCommand("switchyard", []string{"-h"}, io.Discard, io.Discard); got != 0 {
		t.Errorf("certs -h: %d, want 0", got)
	}
}

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{"": nil, " , ": nil, "a": {"a"}, " a, b ,,c ": {"a", "b", "c"}} {
		if got := SplitList(in); !slices.Equal(got, want) {
			t.Errorf("SplitList(%q) = %q, want %q", in, got, want)
		}
	}
}

// A bad flag is answered by its error and where the flags are listed, not
// by the whole list; --help prints the list.
func TestBadFlagAnsweredBriefly(t *testing.T) {
	newFS := func(out io.Writer) *flag.FlagSet {
		fs := flag.NewFlagSet("svc", flag.ContinueOnError)
		fs.SetOutput(out)
		fs.Duration("lease-ttl", time.Second, "how long a lease lasts")
		return fs
	}
	var out strings.Builder
	if err := ParseFlags(newFS(&out), []string{"--lease-ttl", "abc"}); !IsUsage(err) {
		t.Fatalf("a bad value: %v, want a usage error", err)
	}
	if got := out.String(); got != "invalid value \"abc\" for flag -lease-ttl: parse error\n(--help lists the flags)\n" {
		t.Errorf("a bad value printed %q", got)
	}
	out.Reset()
	if err := ParseFlags(newFS(&out), []string{"--help"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "how long a lease lasts") {
		t.Errorf("--help: %v, printed %q; want the flag list", err, out.String())
	}
}

// A service's name leads its error once, whether or not the error names it.
func TestMainStatusNamesTheServiceOnce(t *testing.T) {
	for _, e := range []string{"frontend: --trace-file x: denied", "--trace-file x: denied"} {
		var stderr strings.Builder
		mainStatus("frontend", nil, &stderr, func(context.Context, []string) error { return errors.New(e) })
		if got, want := stderr.String(), "frontend: --trace-file x: denied\n"; got != want {
			t.Errorf("error %q printed %q, want %q", e, got, want)
		}
	}
}

// A service's --help names its subcommands, which compose and the Dockerfile
// rely on.
func TestServiceUsageNamesTheSubcommands(t *testing.T) {
	fs, _ := ServiceFlags("scheduler", func(*flag.FlagSet) {})
	var out strings.Builder
	fs.SetOutput(&out)
	fs.Usage()
	for _, want := range []string{"Usage: scheduler [flags]", "scheduler healthcheck [--addr host:port]", "scheduler certs --out DIR", "-grpc-addr"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage does not say %q:\n%s", want, out.String())
		}
	}
}
