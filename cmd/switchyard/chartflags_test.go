package main

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	engineshim "switchyard.dev/services/engine-shim"
	flashindexer "switchyard.dev/services/flash-indexer"
	"switchyard.dev/services/frontend"
	kvpoolservice "switchyard.dev/services/kv-pool"
	kvhintemitter "switchyard.dev/services/kvhint-emitter"
	"switchyard.dev/services/scheduler"
	"switchyard.dev/services/servicekit"
	sessionindexer "switchyard.dev/services/session-prefix-indexer"
)

// The Helm chart passes each service's `flags` map to it as SWITCHYARD_*
// variables, and a service reads only the variables of flags it has: a
// misspelt key would be ignored. The chart's schema names every flag of
// each service (propertyNames), so that helm refuses a misspelt one at
// install; this test keeps those lists equal to the services' flags.
func TestChartSchemaNamesEachServicesFlags(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/helm/switchyard/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path    []string // to the flags object in the schema
		service string
		flags   func(*flag.FlagSet)
	}{
		{[]string{"frontend"}, "frontend", ptr(frontend.DefaultConfig()).RegisterFlags},
		{[]string{"scheduler"}, "scheduler", ptr(scheduler.DefaultConfig()).RegisterFlags},
		{[]string{"flashIndexer"}, "flash-indexer", ptr(flashindexer.DefaultConfig()).RegisterFlags},
		{[]string{"sessionPrefixIndexer"}, "session-prefix-indexer", ptr(sessionindexer.DefaultConfig()).RegisterFlags},
		{[]string{"kvhintEmitter"}, "kvhint-emitter", ptr(kvhintemitter.DefaultConfig()).RegisterFlags},
		{[]string{"kvPool"}, "kv-pool", ptr(kvpoolservice.DefaultConfig()).RegisterFlags},
		{[]string{"enginePoolDefaults", "shim"}, "engine-shim", ptr(engineshim.DefaultConfig()).RegisterFlags},
	} {
		want := serviceFlags(c.service, c.flags)
		got, err := schemaFlagNames(schema, c.path)
		if err != nil {
			t.Errorf("%s: %v", strings.Join(c.path, "."), err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s.flags in values.schema.json names %d flags, %s has %d: set its propertyNames.enum to\n%s",
				strings.Join(c.path, "."), len(got), c.service, len(want), quoted(want))
		}
	}
	// A pool's own shim flags take the same names as the defaults'.
	pools, err := schemaFlagNames(schema, []string{"enginePools", "[]", "shim"})
	if err != nil {
		t.Fatal(err)
	}
	if want := serviceFlags("engine-shim", ptr(engineshim.DefaultConfig()).RegisterFlags); !slices.Equal(pools, want) {
		t.Errorf("enginePools[].shim.flags names %v, want the engine shim's flags %v", pools, want)
	}
}

func ptr[T any](v T) *T { return &v }

// serviceFlags are the names of the flags a service's binary takes, as
// servicekit.Serve parses them, sorted.
func serviceFlags(name string, register func(*flag.FlagSet)) []string {
	fs, _ := servicekit.ServiceFlags(name, register)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	slices.Sort(names)
	return names
}

// schemaFlagNames is the sorted propertyNames.enum of the flags object at
// path (properties by name; "[]" steps into an array's items).
func schemaFlagNames(schema map[string]any, path []string) ([]string, error) {
	node := schema
	for _, p := range append(slices.Clone(path), "flags") {
		next, ok := node["items"].(map[string]any)
		if p != "[]" {
			props, _ := node["properties"].(map[string]any)
			next, ok = props[p].(map[string]any)
		}
		if !ok {
			return nil, errNoSchemaNode(p)
		}
		node = next
	}
	pn, _ := node["propertyNames"].(map[string]any)
	enum, _ := pn["enum"].([]any)
	names := make([]string, 0, len(enum))
	for _, e := range enum {
		s, _ := e.(string)
		names = append(names, s)
	}
	slices.Sort(names)
	return names, nil
}

type errNoSchemaNode string

func (e errNoSchemaNode) Error() string { return "the schema has no " + string(e) + " here" }

func quoted(names []string) string {
	b, _ := json.Marshal(names)
	return string(b)
}
