package routing

import (
	"fmt"
	"time"
)

// Policy names a routing policy.
type Policy string

const (
	PolicyRoundRobin   Policy = "round_robin"
	PolicyLeastLoaded  Policy = "least_loaded"
	PolicyKV           Policy = "kv"
	PolicyKVAffinity   Policy = "kv_affinity"
	PolicySessionAware Policy = "session_aware"
)

// Policies lists every policy, in the order they are documented.
var Policies = []Policy{PolicyRoundRobin, PolicyLeastLoaded, PolicyKV, PolicyKVAffinity, PolicySessionAware}

// ParsePolicy maps a flag value to a Policy.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("routing: unknown policy %q (want one of %v)", s, Policies)
}

// UsesAffinity reports whether the policy keeps session bindings.
func (p Policy) UsesAffinity() bool { return p == PolicyKVAffinity || p == PolicySessionAware }

// Admits reports whether admission control decides the policy's session
// turns, keeping the program table (lifecycle, pauses) that the hint
// emitter and the console's admission view follow.
func (p Policy) Admits() bool { return p == PolicySessionAware }

// UsesKV reports whether the policy scores with the KV cost function.
func (p Policy) UsesKV() bool {
	return p == PolicyKV || p == PolicyKVAffinity || p == PolicySessionAware
}

// AffinityMode says how binding a session to a worker constrains selection.
type AffinityMode string

const (
	// AffinityHard dispatches every request of a bound session to its worker
	// while that worker is a candidate (Dynamo's default).
	AffinityHard AffinityMode = "hard"
	// AffinitySoft keeps the bound worker unless another worker is cheaper by
	// more than Config.SoftAffinityMarginBlocks; the binding then moves.
	AffinitySoft AffinityMode = "soft"
)

// Config holds the cost function weights (Dynamo's names and defaults, see
// dynamo.md §3.1) and the affinity knobs.
type Config struct {
	Policy Policy

	// BlockSize is the KV block size in tokens, used when a request does not
	// carry its own.
	BlockSize int

	// OverlapScoreCredit scales the device-overlap credit (1.0 = every cached
	// block saves one block of prefill).
	OverlapScoreCredit float64
	// OverlapScoreCreditDecay shrinks the device credit on workers with more
	// queued prefill than the least busy eligible worker; 0 disables it.
	OverlapScoreCreditDecay float64
	// PrefillLoadScale weighs the adjusted prefill blocks against decode blocks.
	PrefillLoadScale float64
	// HostCacheHitWeight credits blocks found on pinned host memory beyond the
	// device overlap.
	HostCacheHitWeight float64
	// DiskCacheHitWeight credits blocks found on disk beyond the host overlap.
	DiskCacheHitWeight float64
	// SharedCacheMultiplier credits blocks found in the shared pool beyond the
	// device overlap (Dynamo: 0, or 0.5 when a shared cache is enabled).
	SharedCacheMultiplier float64
	// DecodeActiveRequestWeight adds a cost per active request.
	DecodeActiveRequestWeight float64
	// Temperature 0 selects the cheapest worker (random tie-break); above 0 it
	// samples from a softmax over normalised costs.
	Temperature float64

	// AffinityTTL is how long an idle session binding lives; 0 disables
	// session affinity even for affinity policies.
	AffinityTTL time.Duration
	// AffinityMode is hard or soft.
	AffinityMode AffinityMode
	// SoftAffinityMarginBlocks is how much cheaper (in cost blocks) another
	// worker must be before a soft binding moves.
	SoftAffinityMarginBlocks float64
	// SubagentMaxUtilization: a new sub-agent session is placed on its
	// parent's worker when that worker's KV use (in-flight plus reported
	// blocks over capacity) is below this fraction and it has a free request
	// slot.
	SubagentMaxUtilization float64
	// StaleRequestAfter drops in-flight load entries never freed (a lost
	// FinishRequest), like Dynamo's 5 minute sweep, counting from when the
	// request was routed or last reported running (Router.Running).
	StaleRequestAfter time.Duration
}

// SharedPoolCacheMultiplier is the SharedCacheMultiplier to use when the
// fleet has a shared KV pool: Dynamo's CLI sets 0.5 when a shared cache is
// enabled (dynamo.md §5), while its config default (DefaultConfig) is 0.
const SharedPoolCacheMultiplier = 0.5

// DefaultConfig returns Dynamo's defaults for the cost function and the
// Switchyard defaults for the rest.
func DefaultConfig() Config {
	return Config{
		Policy:                    PolicyKV,
		BlockSize:                 16,
		OverlapScoreCredit:        1.0,
		OverlapScoreCreditDecay:   0,
		PrefillLoadScale:          1.0,
		HostCacheHitWeight:        0.75,
		DiskCacheHitWeight:        0.25,
		SharedCacheMultiplier:     0.0,
		DecodeActiveRequestWeight: 0,
		Temperature:               0,
		AffinityTTL:               10 * time.Minute,
		AffinityMode:              AffinityHard,
		SoftAffinityMarginBlocks:  0,
		SubagentMaxUtilization:    0.85,
		StaleRequestAfter:         5 * time.Minute,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("routing: block size %d must be positive", c.BlockSize)
	case c.OverlapScoreCredit < 0, c.OverlapScoreCreditDecay < 0, c.PrefillLoadScale < 0,
		c.HostCacheHitWeight < 0, c.DiskCacheHitWeight < 0, c.SharedCacheMultiplier < 0,
		c.DecodeActiveRequestWeight < 0:
		return fmt.Errorf("routing: cost weights must not be negative")
	case c.Temperature < 0:
		return fmt.Errorf("routing: temperature %v must not be negative", c.Temperature)
	case c.AffinityMode != AffinityHard && c.AffinityMode != AffinitySoft:
		return fmt.Errorf("routing: affinity mode %q (want hard or soft)", c.AffinityMode)
	case c.AffinityTTL < 0:
		return fmt.Errorf("routing: affinity TTL must not be negative")
	}
	if _, err := ParsePolicy(string(c.Policy)); err != nil {
		return err
	}
	return nil
}
