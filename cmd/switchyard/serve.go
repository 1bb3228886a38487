package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"switchyard.dev/services/engine-shim"
	"switchyard.dev/services/flash-indexer"
	"switchyard.dev/services/frontend"
	"switchyard.dev/services/kv-pool"
	"switchyard.dev/services/kvhint-emitter"
	"switchyard.dev/services/scheduler"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/session-prefix-indexer"
)

// services maps each service name to its entry point: the very function its own
// binary (services/<name>/cmd/<name>) runs, so both ways behave the same.
var services = map[string]func(ctx context.Context, args []string) error{
	"frontend":               frontend.Main,
	"scheduler":              scheduler.Main,
	"flash-indexer":          flashindexer.Main,
	"session-prefix-indexer": sessionindexer.Main,
	"kvhint-emitter":         kvhintemitter.Main,
	"engine-shim":            engineshim.Main,
	"kv-pool":                kvpoolservice.Main,
}

func serviceNames() string {
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

const serveUsage = `Usage: switchyard serve <service> [flags]
       switchyard serve <service> healthcheck [--addr host:port]
       switchyard serve <service> certs --out DIR [flags]

Runs one service, as its container does. Services: %s

Run "switchyard serve <service> --help" for a service's flags.
`

// serve runs one service: `switchyard serve <service> [flags]`, or
// `switchyard serve <service> healthcheck [--addr host:port]` for container
// healthchecks, or its `certs` subcommand, as the service's own binary has
// them.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "switchyard serve: name a service: %s\n", serviceNames())
		return errUsage
	}
	name, rest := args[0], args[1:]
	if isHelp(name) {
		fmt.Fprintf(stdout, serveUsage, serviceNames())
		return nil
	}
	main, ok := services[name]
	if !ok {
		fmt.Fprintf(stderr, "switchyard serve: unknown service %q; services: %s\n", name, serviceNames())
		return errUsage
	}
	if len(rest) > 0 && rest[0] == "healthcheck" {
		if code := servicekit.HealthcheckCommand(name, rest[1:], stderr); code != 0 {
			return exitStatus(code)
		}
		return nil
	}
	if len(rest) > 0 && rest[0] == "certs" {
		if code := servicekit.CertsCommand(name, rest[1:], stdout, stderr); code != 0 {
			return exitStatus(code)
		}
		return nil
	}
	err := main(ctx, rest)
	if servicekit.IsUsage(err) {
		return errUsage // explained where the flags print, as the service's own binary does
	}
	return err
}
