package sessionindexer

import (
	"flag"
	"time"

	"switchyard.dev/pkg/sessionindex"
	"switchyard.dev/services/servicekit"
)

// Config configures the service.
type Config struct {
	// SchedulerAddr is the scheduler's gRPC address (WatchWorkers,
	// WatchPrograms, WatchRouteDecisions).
	SchedulerAddr string
	// MaxSessions caps tracked sessions (LRU).
	MaxSessions int
	// WatchPrograms learns sub-agent parents from the scheduler.
	WatchPrograms bool
	// WatchRoutes records the scheduler's route decisions (prefix hits).
	WatchRoutes bool
	// MatchWait is how long a route decision's hit waits for the worker's
	// KV events to make its block resident here; MatchBacklog caps the
	// waiting hits per worker.
	MatchWait    time.Duration
	MatchBacklog int
	// Backoff paces reconnections to any peer.
	Backoff servicekit.Backoff
}

// DefaultConfig is the one place defaults live.
func DefaultConfig() Config {
	return Config{
		SchedulerAddr: servicekit.LocalAddr("scheduler"),
		MaxSessions:   sessionindex.DefaultMaxSessions,
		WatchPrograms: true,
		WatchRoutes:   true,
		MatchWait:     10 * time.Second,
		MatchBacklog:  4096,
		Backoff:       servicekit.DefaultBackoff(),
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SchedulerAddr == "" {
		c.SchedulerAddr = d.SchedulerAddr
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.MatchWait <= 0 {
		c.MatchWait = d.MatchWait
	}
	if c.MatchBacklog <= 0 {
		c.MatchBacklog = d.MatchBacklog
	}
	c.Backoff = c.Backoff.WithDefaults()
	return c
}

// RegisterFlags registers the service's flags (SWITCHYARD_* with EnvFlags).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SchedulerAddr, "scheduler-addr", c.SchedulerAddr, "scheduler gRPC addresses, comma-separated: every replica's programs and routes, the workers from any")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "most sessions tracked; the least recently touched is forgotten")
	fs.BoolVar(&c.WatchPrograms, "watch-programs", c.WatchPrograms, "learn sub-agent parents from the scheduler's program stream")
	fs.BoolVar(&c.WatchRoutes, "watch-routes", c.WatchRoutes, "record the scheduler's route decisions (prefix hits on the chosen worker) as lineage")
	fs.DurationVar(&c.MatchWait, "match-wait", c.MatchWait, "how long a route decision's hit waits for the worker's KV events to catch up")
	fs.IntVar(&c.MatchBacklog, "match-backlog", c.MatchBacklog, "most route-decision hits waiting per worker")
	c.Backoff.RegisterFlags(fs, "a peer")
	for _, name := range []string{"max-sessions", "match-wait", "match-backlog"} {
		servicekit.Bound(fs, name, "> 0", func(v float64) bool { return v > 0 })
	}
}
