package scheduler

import (
	"flag"
	"fmt"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/routing"
)

// Config configures the service. Every knob of the routing and admission
// cores has a flag (and so a SWITCHYARD_* variable).
type Config struct {
	// FlashIndexerAddr is the flash indexer's gRPC address (FindMatches).
	FlashIndexerAddr string
	// PeerAddrs lists the scheduler replicas (comma-separated gRPC
	// addresses; this one's own may be among them): each hears the
	// others' admission use and decides with its share of every worker
	// (peers.go). Empty: this scheduler is the only one.
	PeerAddrs string
	// PeerSyncInterval is how often a peer looks at its use and sends it
	// if it changed; PeerStaleAfter how long a peer that stopped answering
	// still counts (an unchanged use is sent again after a third of it).
	PeerSyncInterval time.Duration
	PeerStaleAfter   time.Duration
	// Policy is the default routing policy: round_robin, least_loaded, kv,
	// kv_affinity or session_aware.
	Policy string
	// FindMatchesTimeout bounds the indexer call inside Route; past it the
	// route is decided with no overlap.
	FindMatchesTimeout time.Duration
	// PredictOnRouteTTL turns predict-on-route on (predict.go) when > 0.
	PredictOnRouteTTL time.Duration
	// LeaseTTL is how long a worker lives without a heartbeat.
	LeaseTTL time.Duration
	// HeartbeatTransit is how long a heartbeat may take to arrive once
	// sent: its load is taken as sampled that much before the worker says,
	// so that a turn that finished while it was on its way stays taken out
	// of it (routing.LoadTracker.ReportedAt). 0 takes a load as sampled
	// when the worker says (the replay-path test, whose heartbeats carry
	// replay's exact reads).
	HeartbeatTransit time.Duration
	// LeaseCheckInterval is how often expired leases are reaped.
	LeaseCheckInterval time.Duration
	// WorkerHealthInterval is how often every shim's gRPC health is checked
	// (health.go); ≤ 0 turns the checks off, leaving leases alone to find
	// dead workers.
	WorkerHealthInterval time.Duration
	// WorkerHealthTimeout bounds one check; a shim that does not answer
	// SERVING within it is deregistered until it registers again.
	WorkerHealthTimeout time.Duration
	// Seed seeds the routing tie-breaks; 0 picks one at random.
	Seed uint64
	// RouteScores is how many workers' scores a RouteResponse explains (the
	// chosen one, then the cheapest others); 0 = all.
	RouteScores int
	// MaxSessions bounds the sessions this replica records for the admin
	// API (sessions.go); the least recently active are forgotten first.
	MaxSessions int
	// ChainCacheHashes bounds the hash chains of recent routes kept whole
	// for a session's next Route to name as its base; 0 keeps none.
	ChainCacheHashes int

	Routing   routing.Config
	Admission admission.Config
}

// DefaultConfig is the one place defaults live.
func DefaultConfig() Config {
	rc := routing.DefaultConfig()
	return Config{
		FlashIndexerAddr:   "127.0.0.1:9200",
		Policy:             string(rc.Policy),
		FindMatchesTimeout: 250 * time.Millisecond,
		LeaseTTL:           registry.DefaultConfig().LeaseTTL,
		HeartbeatTransit:   100 * time.Millisecond,
		LeaseCheckInterval: time.Second,
		// A dead shim stops being routed to within about a second (and at
		// once when a frontend reports it), against the 10 s lease.
		WorkerHealthInterval: time.Second,
		WorkerHealthTimeout:  time.Second,
		RouteScores:          8,
		MaxSessions:          16384,
		ChainCacheHashes:     basecache.DefaultChainHashes,
		// Staleness of the others' use: at most 100 ms plus a call while
		// they answer; a dead one stops counting within a second.
		PeerSyncInterval: 100 * time.Millisecond,
		PeerStaleAfter:   time.Second,
		Routing:          rc,
		Admission:        admission.DefaultConfig(),
		// On by default: without it an agent's next turn, sent the moment
		// the previous one ends, can be routed before the indexer has the
		// previous turn's KV events and lose its cache (seen in the compose
		// smoke test under the kv policy); 10 s covers the event lag.
		PredictOnRouteTTL: 10 * time.Second,
	}
}

// withDefaults fills zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	p, err := routing.ParsePolicy(c.Policy)
	if err != nil {
		return c, err
	}
	if c.Routing == (routing.Config{}) {
		c.Routing = d.Routing
	}
	c.Routing.Policy = p
	if c.Admission == (admission.Config{}) {
		c.Admission = d.Admission
	}
	// A negative value would otherwise take its default (or turn a feature
	// off) without a word; 0 takes the default where the help says so.
	for _, f := range []struct {
		flag     string
		v        time.Duration
		negative bool
	}{{"--peer-sync-interval", c.PeerSyncInterval, c.PeerSyncInterval < 0},
		{"--peer-stale-after", c.PeerStaleAfter, c.PeerStaleAfter < 0},
		{"--find-matches-timeout", c.FindMatchesTimeout, c.FindMatchesTimeout < 0},
		{"--predict-on-route-ttl", c.PredictOnRouteTTL, c.PredictOnRouteTTL < 0},
		{"--lease-ttl", c.LeaseTTL, c.LeaseTTL < 0},
		{"--lease-check-interval", c.LeaseCheckInterval, c.LeaseCheckInterval < 0},
		{"--worker-health-timeout", c.WorkerHealthTimeout, c.WorkerHealthTimeout < 0},
		{"--program-idle-ttl", c.Admission.IdleTTL, c.Admission.IdleTTL < 0},
		{"--terminated-retention", c.Admission.TerminatedRetention, c.Admission.TerminatedRetention < 0}} {
		if f.negative {
			return c, fmt.Errorf("%s %v: must not be negative", f.flag, f.v)
		}
	}
	if t := c.Admission.TickInterval; t <= 0 {
		return c, fmt.Errorf("--tick-interval %v: must be positive", t)
	}
	for _, f := range []struct {
		flag string
		v    int
	}{{"--max-sessions", c.MaxSessions}, {"--route-scores", c.RouteScores}, {"--chain-cache-hashes", c.ChainCacheHashes}} {
		if f.v < 0 {
			return c, fmt.Errorf("%s %d: must not be negative", f.flag, f.v)
		}
	}
	if c.PeerSyncInterval <= 0 {
		c.PeerSyncInterval = d.PeerSyncInterval
	}
	if c.PeerStaleAfter <= 0 {
		c.PeerStaleAfter = max(d.PeerStaleAfter, 3*c.PeerSyncInterval)
	}
	if c.PeerStaleAfter < 3*c.PeerSyncInterval {
		// A peer whose use is unchanged is heard every third of the bound
		// (at least every interval): a shorter bound would drop live peers.
		return c, fmt.Errorf("--peer-stale-after %v is shorter than three --peer-sync-interval (%v)", c.PeerStaleAfter, c.PeerSyncInterval)
	}
	if a := c.Routing.StaleRequestAfter; a < 0 {
		return c, fmt.Errorf("--stale-request-after %v is negative (0 = never)", a)
	} else if a > 0 && a < registry.MinStaleAge {
		return c, fmt.Errorf("--stale-request-after %v is shorter than %v: the shims name a request still running only once it has run %v, at their next heartbeat (up to %v apart), and a running turn would lose its load",
			a, registry.MinStaleAge, registry.LongRunning, registry.MaxHeartbeat)
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.FindMatchesTimeout <= 0 {
		c.FindMatchesTimeout = d.FindMatchesTimeout
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.LeaseCheckInterval <= 0 {
		c.LeaseCheckInterval = min(d.LeaseCheckInterval, c.LeaseTTL/2)
	}
	if c.WorkerHealthInterval > 0 && c.WorkerHealthTimeout <= 0 {
		c.WorkerHealthTimeout = d.WorkerHealthTimeout
	}
	if err := c.Routing.Validate(); err != nil {
		return c, err
	}
	if err := c.Admission.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// RegisterFlags registers the service's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.FlashIndexerAddr, "flash-indexer-addr", c.FlashIndexerAddr, "flash indexer gRPC addresses, comma-separated: FindMatches is spread over those caught up, and fails over")
	fs.StringVar(&c.PeerAddrs, "peer-addrs", c.PeerAddrs, "every scheduler replica's gRPC address, comma-separated (this one's may be listed): replicas exchange admission use (empty: the only scheduler)")
	fs.DurationVar(&c.PeerSyncInterval, "peer-sync-interval", c.PeerSyncInterval, "how often another replica sends its admission use when it changed (unchanged: every third of --peer-stale-after; 0 = the default)")
	fs.DurationVar(&c.PeerStaleAfter, "peer-stale-after", c.PeerStaleAfter, "a replica not heard for this long no longer counts (its share returns to the others); at least three --peer-sync-interval (0 = the larger of the default and that)")
	fs.StringVar(&c.Policy, "policy", c.Policy, "default routing policy: round_robin, least_loaded, kv, kv_affinity, session_aware")
	fs.DurationVar(&c.FindMatchesTimeout, "find-matches-timeout", c.FindMatchesTimeout, "deadline of the indexer call inside Route (then: no overlap; 0 = the default)")
	fs.DurationVar(&c.PredictOnRouteTTL, "predict-on-route-ttl", c.PredictOnRouteTTL, "after each KV route, tell the flash indexer the worker will hold the prompt for this long, and count such predictions in lookups (0 = off)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "how long a worker lives without a heartbeat (0 = the default)")
	fs.DurationVar(&c.LeaseCheckInterval, "lease-check-interval", c.LeaseCheckInterval, "how often expired worker leases are reaped (0 = the default, or half --lease-ttl if shorter)")
	fs.DurationVar(&c.WorkerHealthInterval, "worker-health-interval", c.WorkerHealthInterval, "how often every engine shim's gRPC health is checked; a failing one is deregistered until it registers again (≤ 0: off, only leases)")
	fs.DurationVar(&c.WorkerHealthTimeout, "worker-health-timeout", c.WorkerHealthTimeout, "longest wait for one shim health check (0 = the default)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the routing tie-breaks (0 = random); replicas given one seed break ties alike, so give each replica its own")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "sessions recorded for the admin API (turns and tokens of each), the least recently active forgotten first (0 = the default)")
	fs.IntVar(&c.ChainCacheHashes, "chain-cache-hashes", c.ChainCacheHashes, "memory for recent routes' hash chains, in 8-byte hashes (each chain's room and bookkeeping counted), so that a session's next Route sends only the hashes its chain adds; about 7,100 per 100k-token session (0 = keep none)")
	fs.IntVar(&c.RouteScores, "route-scores", c.RouteScores, "workers whose scores a Route response explains: the chosen one and the cheapest others (0 = all)")

	r := &c.Routing
	fs.IntVar(&r.BlockSize, "block-size", r.BlockSize, "tokens per KV block when a request gives none")
	fs.Float64Var(&r.OverlapScoreCredit, "overlap-score-credit", r.OverlapScoreCredit, "prefill blocks credited per device-cached block")
	fs.Float64Var(&r.OverlapScoreCreditDecay, "overlap-score-credit-decay", r.OverlapScoreCreditDecay, "shrink the device credit of workers with longer prefill queues (0 = off)")
	fs.Float64Var(&r.PrefillLoadScale, "prefill-load-scale", r.PrefillLoadScale, "weight of prefill blocks against decode blocks")
	fs.Float64Var(&r.HostCacheHitWeight, "host-cache-hit-weight", r.HostCacheHitWeight, "credit per block found on host memory beyond the device prefix")
	fs.Float64Var(&r.DiskCacheHitWeight, "disk-cache-hit-weight", r.DiskCacheHitWeight, "credit per block found on disk beyond the host prefix")
	fs.Float64Var(&r.SharedCacheMultiplier, "shared-cache-multiplier", r.SharedCacheMultiplier, "credit per block found in the shared pool beyond the device prefix")
	fs.Float64Var(&r.DecodeActiveRequestWeight, "decode-active-request-weight", r.DecodeActiveRequestWeight, "cost per active request on a worker")
	fs.Float64Var(&r.Temperature, "router-temperature", r.Temperature, "0 = cheapest worker; > 0 = softmax sampling over normalised costs")
	fs.DurationVar(&r.AffinityTTL, "session-affinity-ttl", r.AffinityTTL, "idle lifetime of a session→worker binding (kv_affinity, session_aware); 0 = off")
	fs.Func("session-affinity-mode", `"hard" or "soft" session affinity (default "`+string(r.AffinityMode)+`")`, func(v string) error {
		if v != string(routing.AffinityHard) && v != string(routing.AffinitySoft) {
			return fmt.Errorf("want hard or soft")
		}
		r.AffinityMode = routing.AffinityMode(v)
		return nil
	})
	fs.Float64Var(&r.SoftAffinityMarginBlocks, "soft-affinity-margin-blocks", r.SoftAffinityMarginBlocks, "soft affinity moves a session only to a worker cheaper by more than this")
	fs.Float64Var(&r.SubagentMaxUtilization, "subagent-max-utilization", r.SubagentMaxUtilization, "a sub-agent joins its parent's worker while that worker's KV use is below this fraction")
	fs.DurationVar(&r.StaleRequestAfter, "stale-request-after", r.StaleRequestAfter, "drop the load of a routed request never finished and not named running by its worker's heartbeats for this long (its FinishRequest was lost); at least 2m, 0 = never")

	a := &c.Admission
	a.RegisterFlags(fs, "")
	fs.DurationVar(&a.TickInterval, "tick-interval", a.TickInterval, "admission control period")
	fs.DurationVar(&a.IdleTTL, "program-idle-ttl", a.IdleTTL, "release ACTING programs idle this long (0 = never)")
	fs.DurationVar(&a.TerminatedRetention, "terminated-retention", a.TerminatedRetention, "keep released programs readable this long")
}
