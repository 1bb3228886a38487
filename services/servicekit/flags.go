package servicekit

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvPrefix starts the environment variable of every flag.
const EnvPrefix = "SWITCHYARD_"

// EnvName is the environment variable for a flag: SWITCHYARD_ + the name in upper case
// with dashes and dots as underscores ("grpc-addr" → SWITCHYARD_GRPC_ADDR).
func EnvName(flagName string) string {
	return EnvPrefix + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(flagName))
}

// EnvFlags gives each flag of fs that was not set on the command line the value of its
// environment variable (EnvName), if that variable exists (even empty). Call it after
// fs.Parse: the command line wins over the environment, which wins over the default.
// A value the flag rejects is an error handled like fs.Parse would (exit, panic or
// return, per fs.ErrorHandling()).
func EnvFlags(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		key := EnvName(f.Name)
		v, ok := os.LookupEnv(key)
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("invalid value %q for %s (flag -%s): %w", v, key, f.Name, err))
		}
	})
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	fmt.Fprintln(fs.Output(), err)
	switch fs.ErrorHandling() {
	case flag.ExitOnError:
		os.Exit(2)
	case flag.PanicOnError:
		panic(err)
	}
	return usageError{err}
}

// SplitList is the items of a comma-separated flag value, trimmed, without
// the empty ones ("" is none).
func SplitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// ParseFlags is fs.Parse(args) followed by EnvFlags(fs), for a command
// line of flags only. Its errors, printed on fs's output as the flag
// package prints its own, make Main exit 2 (IsUsage). A word left over is
// one: the flag package stops at the first word that is not a flag, so
// every flag after a stray word would be dropped without a word.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := ParseBriefly(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if err := strayWord(fs); err != nil {
		return err
	}
	return EnvFlags(fs)
}

// ParseBriefly is fs.Parse(args), with a bad flag answered by its error and
// where to find the flags, not by the whole flag list after it (a
// scheduler's is 142 lines, the error scrolled away above them); -h and
// --help print the list.
func ParseBriefly(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp) && usage != nil:
		usage()
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
	case err != nil:
		fmt.Fprintln(fs.Output(), "(--help lists the flags)")
	}
	return err
}

// strayWord refuses, and explains on fs's output, a word left after the
// flags of a command line of flags only.
func strayWord(fs *flag.FlagSet) error {
	if fs.NArg() == 0 {
		return nil
	}
	err := fmt.Errorf("unexpected argument %q (flags after it would be ignored)", fs.Arg(0))
	fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
	return usageError{err}
}

// usageError marks a bad command line or environment (exit status 2),
// already explained on the flag set's output.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// IsUsage reports whether err is a bad command line or environment that
// ParseFlags has already explained: a caller exits 2 without saying more.
func IsUsage(err error) bool { return errors.As(err, new(usageError)) }
