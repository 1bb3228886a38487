package replay

import (
	"fmt"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/routing"
)

// Policy is one row of the experiment: a routing policy, the admission in
// front of it, and for the oracle the cluster it runs on.
type Policy string

const (
	// PolicyRoundRobin is a plain load balancer, blind to the cache.
	PolicyRoundRobin Policy = "round_robin"
	// PolicyLeastLoaded routes to the worker with the fewest active blocks.
	PolicyLeastLoaded Policy = "least_loaded"
	// PolicyKV is Dynamo's KvRouter with its defaults.
	PolicyKV Policy = "kv"
	// PolicyKVSticky is kv with hard session affinity (Dynamo's
	// --router-session-affinity).
	PolicyKVSticky Policy = "kv_sticky"
	// PolicyKVCap is kv behind a plain cap of active sessions, sized per
	// worker (Config.SessionCap × workers slots for the fleet, taken in
	// arrival order and held until the session ends): the first thing an
	// operator would try.
	PolicyKVCap Policy = "kv_cap"
	// PolicyThunderAgent is ThunderAgent's admission with upstream's
	// defaults (admission.ThunderAgentConfig) in front of session-aware
	// routing.
	PolicyThunderAgent Policy = "thunderagent"
	// PolicySessionAware is Switchyard's admission (Config.Admission) in
	// front of session-aware routing.
	PolicySessionAware Policy = "session_aware"
	// PolicyOracle is kv on the same cluster with unbounded device KV: an
	// upper bound no policy may beat.
	PolicyOracle Policy = "oracle"
)

// Policies lists every policy, in the order the results show them.
var Policies = []Policy{PolicyRoundRobin, PolicyLeastLoaded, PolicyKV, PolicyKVSticky, PolicyKVCap,
	PolicyThunderAgent, PolicySessionAware, PolicyOracle}

// ParsePolicy maps a flag value to a Policy. kv_affinity, routing's name
// for kv_sticky, is accepted too.
func ParsePolicy(s string) (Policy, error) {
	if s == string(routing.PolicyKVAffinity) {
		return PolicyKVSticky, nil
	}
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("replay: unknown policy %q (want one of %v)", s, Policies)
}

// Routing is the routing policy the row runs.
func (p Policy) Routing() routing.Policy {
	switch p {
	case PolicyRoundRobin:
		return routing.PolicyRoundRobin
	case PolicyLeastLoaded:
		return routing.PolicyLeastLoaded
	case PolicyKVSticky:
		return routing.PolicyKVAffinity
	case PolicyThunderAgent, PolicySessionAware:
		return routing.PolicySessionAware
	}
	return routing.PolicyKV
}

// admission is the admission controller's configuration for the row, nil
// when it runs none.
func (p Policy) admission(cfg *admission.Config) *admission.Config {
	switch p {
	case PolicyThunderAgent:
		c := admission.ThunderAgentConfig()
		return &c
	case PolicySessionAware:
		if cfg != nil {
			return cfg
		}
		c := admission.DefaultConfig()
		return &c
	}
	return nil
}
