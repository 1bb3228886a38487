package admission

import (
	"testing"
	"time"
)

// Each refusal names the one setting at fault by its flag, as the scheduler
// and `switchyard up`/`replay` register it.
func TestValidateNamesTheFlagAtFault(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.BufferPerProgram = -100 }, "--buffer-per-program -100: must not be negative"},
		{func(c *Config) { c.RotateAfter = -5 * time.Second }, "--rotate-after -5s: must not be negative"},
		{func(c *Config) { c.ColdLane = -1 }, "--cold-lane -1: must not be negative"},
		{func(c *Config) { c.ResidentRetention = -time.Second }, "--resident-retention -1s: must not be negative"},
		{func(c *Config) { c.MaxWait = -time.Second }, "--max-wait -1s: must not be negative"},
		{func(c *Config) { c.DefaultGap = -time.Second }, "--default-tool-gap -1s: must not be negative"},
		{func(c *Config) { c.CapacityTiers = -1 }, "--admission-tiers -1: must not be negative"},
		{func(c *Config) { c.ResumeTimeout = -time.Second }, "--resume-timeout -1s: must be positive"},
		{func(c *Config) { c.ShedBacklog = 2; c.ShedRetryAfter = 0 }, "--shed-retry-after 0s: must be positive while --shed-backlog is set"},
		{func(c *Config) { c.PauseTarget = 0.99 }, "--pause-target 0.99: must be in (0, --pause-threshold 0.85]"},
		{func(c *Config) { c.TerminatedRetention = -time.Second }, "admission: terminated retention -1s must not be negative"},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
