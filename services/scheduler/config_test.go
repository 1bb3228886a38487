package scheduler

import (
	"flag"
	"io"
	"testing"
)

// A negative setting is refused naming its flag, not replaced by the
// default; so is an admission setting, named as the scheduler names it.
func TestNegativeSettingsAreRefusedByFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease-ttl", "-1s"}, "--lease-ttl -1s: must not be negative"},
		{[]string{"--lease-check-interval", "-1s"}, "--lease-check-interval -1s: must not be negative"},
		{[]string{"--find-matches-timeout", "-1s"}, "--find-matches-timeout -1s: must not be negative"},
		{[]string{"--peer-sync-interval", "-1s"}, "--peer-sync-interval -1s: must not be negative"},
		{[]string{"--peer-stale-after", "-1s"}, "--peer-stale-after -1s: must not be negative"},
		{[]string{"--predict-on-route-ttl", "-1s"}, "--predict-on-route-ttl -1s: must not be negative"},
		{[]string{"--worker-health-timeout", "-1s"}, "--worker-health-timeout -1s: must not be negative"},
		{[]string{"--max-sessions", "-1"}, "--max-sessions -1: must not be negative"},
		{[]string{"--route-scores", "-1"}, "--route-scores -1: must not be negative"},
		{[]string{"--chain-cache-hashes", "-1"}, "--chain-cache-hashes -1: must not be negative"},
		{[]string{"--terminated-retention", "-1s"}, "--terminated-retention -1s: must not be negative"},
		{[]string{"--program-idle-ttl", "-1s"}, "--program-idle-ttl -1s: must not be negative"},
		{[]string{"--tick-interval", "0s"}, "--tick-interval 0s: must be positive"},
		{[]string{"--buffer-per-program", "-100"}, "--buffer-per-program -100: must not be negative"},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.withDefaults(); err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	// 0 takes the default where the help says so.
	cfg := DefaultConfig()
	cfg.LeaseTTL, cfg.LeaseCheckInterval, cfg.FindMatchesTimeout, cfg.MaxSessions = 0, 0, 0, 0
	got, err := cfg.withDefaults()
	if d := DefaultConfig(); err != nil || got.LeaseTTL != d.LeaseTTL || got.LeaseCheckInterval != d.LeaseCheckInterval ||
		got.FindMatchesTimeout != d.FindMatchesTimeout || got.MaxSessions != d.MaxSessions {
		t.Fatalf("zeros: %+v, %v", got, err)
	}
}
