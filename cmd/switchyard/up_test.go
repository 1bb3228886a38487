package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard.dev/internal/mesh"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/services/scheduler"
)

// up's --sim-tool-calls (or SWITCHYARD_SIM_TOOL_CALLS) reaches the mesh's
// configuration, which hands it to the frontend (internal/mesh tests the rest
// of the way: TestSimToolCallsReachTheFrontend).
func TestUpConfigServerTiming(t *testing.T) {
	for _, args := range [][]string{nil, {"--server-timing"}} {
		cfg, _, err := upConfig(args, io.Discard)
		if err != nil {
			t.Fatalf("upConfig(%q): %v", args, err)
		}
		if cfg.ServerTiming != (args != nil) {
			t.Errorf("upConfig(%q).ServerTiming = %v", args, cfg.ServerTiming)
		}
	}
}

func TestUpConfigSimToolCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string // SWITCHYARD_SIM_TOOL_CALLS; "" leaves it unset
		want bool
	}{
		{name: "default off", want: false},
		{name: "flag", args: []string{"--sim-tool-calls"}, want: true},
		{name: "environment", env: "true", want: true},
		{name: "flag beats environment", args: []string{"--sim-tool-calls=false"}, env: "true", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SWITCHYARD_SIM_TOOL_CALLS", tc.env)
			}
			cfg, _, err := upConfig(tc.args, io.Discard)
			if err != nil {
				t.Fatalf("upConfig(%q): %v", tc.args, err)
			}
			if cfg.SimToolCalls != tc.want {
				t.Errorf("upConfig(%q).SimToolCalls = %v, want %v", tc.args, cfg.SimToolCalls, tc.want)
			}
		})
	}
}

// A replicated mesh (scheduler or frontend replicas) runs two flash
// indexers unless told otherwise, as compose does; a single one runs one.
func TestUpConfigFlashIndexersFollowReplicas(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // SWITCHYARD_FLASH_INDEXERS; "" leaves it unset
		want int
	}{
		{want: 1},
		{args: []string{"--schedulers", "3", "--frontends", "2"}, want: 2},
		{args: []string{"--frontends", "2"}, want: 2},
		{args: []string{"--schedulers", "3", "--flash-indexers", "1"}, want: 1},
		{args: []string{"--schedulers", "3"}, env: "3", want: 3},
		{args: []string{"--flash-indexers", "3"}, want: 3},
	} {
		t.Run(strings.Join(tc.args, " ")+" env="+tc.env, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SWITCHYARD_FLASH_INDEXERS", tc.env)
			}
			cfg, _, err := upConfig(tc.args, io.Discard)
			if err != nil {
				t.Fatalf("upConfig(%q): %v", tc.args, err)
			}
			if cfg.FlashIndexers != tc.want {
				t.Errorf("%d flash indexers, want %d", cfg.FlashIndexers, tc.want)
			}
		})
	}
}

// The conformance stage starts `up --sim-tool-calls --model-aliases a,b`: both
// land in one configuration.
func TestUpConfigHarnessFlags(t *testing.T) {
	cfg, _, err := upConfig([]string{"--sim-tool-calls", "--model-aliases", "claude-sonnet-4-5, claude-haiku-4-5", "--frontend-addr", "127.0.0.1:8000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.SimToolCalls || cfg.FrontendHTTPAddr != "127.0.0.1:8000" ||
		!slices.Equal(cfg.ModelAliases, []string{"claude-sonnet-4-5", "claude-haiku-4-5"}) {
		t.Fatalf("config %+v", cfg)
	}
}

// up's banner says when the policy leaves the program table, and with it
// the KV hints and the console's admission view, empty.
func TestUpSaysWhatAPolicyWithoutAdmissionLeavesOff(t *testing.T) {
	eps := []mesh.Endpoint{
		{Service: "scheduler", Name: "scheduler", GRPC: "127.0.0.1:1", HTTP: "127.0.0.1:2"},
		{Service: "frontend", Name: "frontend", GRPC: "127.0.0.1:3", HTTP: "127.0.0.1:8000"},
	}
	for _, c := range []struct {
		policy routing.Policy
		says   bool
	}{{routing.PolicyKV, true}, {routing.PolicyRoundRobin, true}, {routing.PolicySessionAware, false}} {
		var out strings.Builder
		printEndpoints(&out, &mesh.Mesh{Endpoints: eps, Policy: c.policy}, "")
		if got := strings.Contains(out.String(), "Policy "+string(c.policy)+" runs no admission control"); got != c.says {
			t.Errorf("policy %s: the banner says it runs no admission control: %v, want %v:\n%s", c.policy, got, c.says, out.String())
		}
		if !strings.HasSuffix(out.String(), "Ctrl-C stops everything.\n") {
			t.Errorf("policy %s: the banner does not end with how to stop:\n%s", c.policy, out.String())
		}
	}
}

// up takes admission's knobs under the scheduler's names and hands them to
// every scheduler replica; a value admission refuses is an error before
// anything starts.
func TestUpConfigAdmissionFlags(t *testing.T) {
	cfg, _, err := upConfig([]string{"--policy", "session_aware", "--held-from-index=false", "--max-wait", "45s", "--pause-threshold", "0.9"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := scheduler.DefaultConfig()
	cfg.Scheduler(&sc)
	if a := sc.Admission; a.HeldFromIndex || a.MaxWait != 45*time.Second || a.PauseThreshold != 0.9 {
		t.Errorf("the schedulers' admission: held-from-index %v, max-wait %v, pause threshold %v; want false, 45s, 0.9",
			a.HeldFromIndex, a.MaxWait, a.PauseThreshold)
	}
	if a, d := sc.Admission, scheduler.DefaultConfig().Admission; a.ColdLane != d.ColdLane || a.RotateAfter != d.RotateAfter {
		t.Errorf("knobs not given changed: cold lane %d, rotate after %v; want the scheduler's %d, %v", a.ColdLane, a.RotateAfter, d.ColdLane, d.RotateAfter)
	}
	if _, _, err := upConfig([]string{"--pause-threshold", "-1"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--pause-threshold -1: must be positive") {
		t.Errorf("a negative pause threshold: %v, want admission's error", err)
	}
}
