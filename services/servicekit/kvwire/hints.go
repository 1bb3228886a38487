package kvwire

import (
	"time"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/hints"
)

// HintSupport reads what a worker announced of its engine's hints. A worker
// that announced nothing (an older shim: no hint_support) is an unknown
// Support, which the emitter sends every hint; kinds this build does not
// know are left out (no policy here sends them).
func HintSupport(p *kvv1.HintSupport) hints.Support {
	if p == nil {
		return hints.Support{}
	}
	s := hints.Support{Known: true}
	for _, c := range p.GetCapabilities() {
		k, ok := hints.KindOf(c.GetActionType())
		if !ok {
			continue
		}
		s.Caps = append(s.Caps, hints.Capability{Kind: k, MaxBlocks: int(c.GetMaxBlocks()), MaxPriority: int(c.GetMaxPriority()),
			MaxTTL: time.Duration(c.GetMaxTtlSeconds()) * time.Second, NextRequests: c.GetNextRequests()})
	}
	return s
}

// HintSupportProto is HintSupport's inverse: nil for an unknown Support, an
// empty list for an engine that acts on no hint.
func HintSupportProto(s hints.Support) *kvv1.HintSupport {
	if !s.Known {
		return nil
	}
	out := &kvv1.HintSupport{Capabilities: []*kvv1.HintCapability{}}
	for _, c := range s.Caps {
		out.Capabilities = append(out.Capabilities, &kvv1.HintCapability{ActionType: c.Kind.ActionType(), MaxBlocks: uint32(c.MaxBlocks),
			MaxPriority: int32(c.MaxPriority), MaxTtlSeconds: uint32(c.MaxTTL / time.Second), NextRequests: c.NextRequests})
	}
	return out
}
