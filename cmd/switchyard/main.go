// Command switchyard is Switchyard's command line: it runs the whole mesh in one
// process (up) or one service of it (serve).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"switchyard.dev/services/servicekit"
)

const usage = `switchyard: a session-aware, KV-cache-aware front door for LLM inference fleets.

Usage:
  switchyard up [flags]                 run the whole mesh in one process with simulated workers
  switchyard serve <service> [flags]    run one service (what containers run)
  switchyard replay --trace <file|dir> --format <fmt> [flags]
                                        simulate a trace on virtual time, per policy and concurrency
  switchyard perf <check|show> [flags]  the simulated engine's timing presets and their published checks
  switchyard trace perfetto <in> -o out.json
                                        draw request traces as a Perfetto timeline
  switchyard loadgen --url <endpoint> --trace <file|dir> --format <fmt> [flags]
                                        replay a trace against a live OpenAI-compatible endpoint
  switchyard certs --out <dir> [flags]  write a dev CA and mesh certificates (mutual TLS for compose)
  switchyard help                       this text

Services: %s

Run "switchyard up --help" or "switchyard serve <service> --help" for flags. The flags of
up and serve also read SWITCHYARD_<FLAG> from the environment (upper case, dashes as
underscores); the other commands read only their command line.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts an orderly shutdown, which may drain for
	// seconds; the default action comes back for a second one, so another
	// Ctrl-C quits at once.
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case errors.As(err, new(exitStatus)):
		os.Exit(int(err.(exitStatus)))
	default:
		fmt.Fprintln(os.Stderr, "switchyard:", err)
		os.Exit(1)
	}
}

// exitStatus is an error that only carries the status to exit with; whatever
// went wrong was already printed.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// errUsage marks a command line the flag package or this command already explained.
var errUsage = errors.New("usage")

// newFlagSet is a subcommand's flags: errors go to stderr, and so does its help
// (usage, then the flags).
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	return fs
}

// parseFlags parses the command line of a subcommand that takes flags only;
// its errors are usageError's. A word left over is an error: the flag package
// stops at the first word that is not a flag, so every flag after a stray
// word (a value whose flag was mistyped, a subcommand put last) would be
// dropped without a word.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseFlagsAndArgs(fs, args); err != nil {
		return err
	}
	return noMoreArgs(fs, 0)
}

// parseFlagsAndArgs parses a command line whose words after the flags are
// the subcommand's own (it checks them itself).
func parseFlagsAndArgs(fs *flag.FlagSet, args []string) error {
	return usageError(servicekit.ParseBriefly(fs, args))
}

// noMoreArgs refuses words past the first n after the flags.
func noMoreArgs(fs *flag.FlagSet, n int) error {
	if fs.NArg() <= n {
		return nil
	}
	fmt.Fprintf(fs.Output(), "%s: unexpected argument %q (flags after it would be ignored)\n", fs.Name(), fs.Arg(n))
	return errUsage
}

// usageError is a parse error of a command line as run returns it: flag.ErrHelp
// as it is, any other (the flag package explained it) errUsage.
func usageError(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsage
}

// isHelp reports whether a word in a subcommand's place asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintf(stderr, usage, serviceNames())
		return errUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "up":
		return up(ctx, rest, stdout, stderr)
	case "serve":
		return serve(ctx, rest, stdout, stderr)
	case "replay":
		return replayCmd(ctx, rest, stdout, stderr)
	case "trace":
		return traceCmd(ctx, rest, stdout, stderr)
	case "perf":
		return perfCmd(ctx, rest, stdout, stderr)
	case "loadgen":
		return loadgenCmd(ctx, rest, stdout, stderr)
	case "certs":
		if code := servicekit.CertsCommand("switchyard", rest, stdout, stderr); code != 0 {
			return exitStatus(code)
		}
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprintf(stdout, usage, serviceNames())
		return nil
	default:
		fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n", cmd)
		fmt.Fprintf(stderr, usage, serviceNames())
		return errUsage
	}
}
