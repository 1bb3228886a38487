package kvhintemitter

import (
	"flag"
	"strings"
	"time"

	"switchyard.dev/pkg/hints"
	"switchyard.dev/services/servicekit"
)

// Config configures the service.
type Config struct {
	SchedulerAddr      string
	SessionIndexerAddr string
	// Tick is how often the time-driven policies (long tool calls) are
	// evaluated; lifecycle changes are evaluated at once.
	Tick time.Duration
	// LineageTimeout and ApplyTimeout bound one call to the indexer and to
	// a shim.
	LineageTimeout, ApplyTimeout time.Duration
	// LineageBatch is the most lineage queries one GetSessionLineages call
	// carries; a round that needs more (rare: a round asks only for the
	// programs with something to decide) makes several.
	LineageBatch int
	// RecentHints is how many sent hints ListRecentHints can return.
	RecentHints int
	// Backoff paces reconnections to the scheduler.
	Backoff servicekit.Backoff
	// Hints configures the policies.
	Hints hints.Config
}

// DefaultConfig is the one place defaults live.
func DefaultConfig() Config {
	return Config{
		SchedulerAddr:      servicekit.LocalAddr("scheduler"),
		SessionIndexerAddr: servicekit.LocalAddr("session-prefix-indexer"),
		Tick:               250 * time.Millisecond,
		LineageTimeout:     time.Second,
		ApplyTimeout:       2 * time.Second,
		LineageBatch:       512,
		RecentHints:        1024,
		Backoff:            servicekit.DefaultBackoff(),
		Hints:              hints.DefaultConfig(),
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SchedulerAddr == "" {
		c.SchedulerAddr = d.SchedulerAddr
	}
	if c.SessionIndexerAddr == "" {
		c.SessionIndexerAddr = d.SessionIndexerAddr
	}
	if c.Tick <= 0 {
		c.Tick = d.Tick
	}
	if c.LineageTimeout <= 0 {
		c.LineageTimeout = d.LineageTimeout
	}
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = d.ApplyTimeout
	}
	if c.LineageBatch <= 0 {
		c.LineageBatch = d.LineageBatch
	}
	if c.RecentHints <= 0 {
		c.RecentHints = d.RecentHints
	}
	c.Backoff = c.Backoff.WithDefaults()
	return c
}

// RegisterFlags registers the service's flags (SWITCHYARD_* with EnvFlags).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SchedulerAddr, "scheduler-addr", c.SchedulerAddr, "scheduler gRPC addresses, comma-separated: every replica's program lifecycle, the workers from any")
	fs.StringVar(&c.SessionIndexerAddr, "session-indexer-addr", c.SessionIndexerAddr, "session-prefix indexer gRPC address (lineage)")
	fs.DurationVar(&c.Tick, "tick", c.Tick, "how often time-driven policies are evaluated")
	fs.DurationVar(&c.LineageTimeout, "lineage-timeout", c.LineageTimeout, "deadline of one lineage lookup")
	fs.DurationVar(&c.ApplyTimeout, "apply-timeout", c.ApplyTimeout, "deadline of one ApplyKvHints call")
	fs.IntVar(&c.RecentHints, "recent-hints", c.RecentHints, "sent hints kept for ListRecentHints")
	c.Backoff.RegisterFlags(fs, "the scheduler")
	fs.Func("disable-policies", "comma-separated hint policies that never fire ("+strings.Join(hints.PolicyNames(), ", ")+`); default "`+strings.Join(c.Hints.Disabled, ",")+`", "" enables all`, func(v string) error {
		names := servicekit.SplitList(v)
		if err := hints.ParsePolicies(names); err != nil {
			return err
		}
		c.Hints.Disabled = names
		return nil
	})
	fs.DurationVar(&c.Hints.DefaultToolTime, "default-tool-time", c.Hints.DefaultToolTime, "what counts as a long tool call until enough have been seen to take their median")
	fs.Float64Var(&c.Hints.DemoteMinKVUsage, "demote-min-kv-usage", c.Hints.DemoteMinKVUsage, "demote only from workers whose running requests hold at least this fraction of GPU KV blocks")
	fs.Float64Var(&c.Hints.HintRate, "hint-rate", c.Hints.HintRate, "hints per second per worker (0 = unlimited)")
	fs.Float64Var(&c.Hints.HintBurst, "hint-burst", c.Hints.HintBurst, "hint burst per worker")
	fs.Float64Var(&c.Hints.BlockRate, "block-rate", c.Hints.BlockRate, "blocks moved per second per worker (0 = unlimited)")
	fs.Float64Var(&c.Hints.BlockBurst, "block-burst", c.Hints.BlockBurst, "block burst per worker")
	fs.IntVar(&c.Hints.ShareMaxBlocks, "share-max-blocks", c.Hints.ShareMaxBlocks, "most blocks of a parent's chain offered to a sub-agent")
	fs.IntVar(&c.Hints.RetainPriority, "retain-priority", c.Hints.RetainPriority, "retention priority sent in place of a demote to engines that retain but cannot demote (vLLM, SGLang)")
	fs.DurationVar(&c.Hints.RetainTTL, "retain-ttl", c.Hints.RetainTTL, "how long that retention lasts")
	for _, name := range []string{"tick", "lineage-timeout", "apply-timeout", "recent-hints", "default-tool-time", "share-max-blocks", "retain-ttl"} {
		servicekit.Bound(fs, name, "> 0", func(v float64) bool { return v > 0 })
	}
	for _, name := range []string{"hint-rate", "hint-burst", "block-rate", "block-burst"} {
		servicekit.Bound(fs, name, "≥ 0", func(v float64) bool { return v >= 0 })
	}
	servicekit.Bound(fs, "demote-min-kv-usage", "0..1", func(v float64) bool { return v >= 0 && v <= 1 })
	servicekit.Bound(fs, "retain-priority", "0..100", func(v float64) bool { return v >= 0 && v <= 100 })
}
