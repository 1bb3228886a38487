package hints

import (
	"fmt"
	"slices"
	"time"
)

// Kind is the type of a hint action: the one hint vocabulary of Switchyard.
// The policies propose Kinds, the simulated engine executes them
// (enginesim.Hint), the kvhint emitter and the engine shim translate them to
// and from the wire (switchyard.kv.v1.KvHintAction, whose action_type is
// Kind.ActionType).
type Kind uint8

const (
	// KindShare imports a root-first prefix another worker (or the shared
	// pool) holds, at transfer cost, instead of recomputing it.
	KindShare Kind = iota + 1
	// KindPrefetch loads a session's blocks from host or disk back into the
	// device ahead of its next turn.
	KindPrefetch
	// KindDemote moves a session's idle device blocks to a colder tier
	// instead of letting them be dropped.
	KindDemote
	// KindRetain raises the eviction priority of a session's blocks for a
	// while (Action.Priority, Action.TTL): what engines that cannot demote
	// get in place of a demote (Nearest).
	KindRetain
	// KindRelease says the session is finished: its blocks may go first.
	KindRelease
)

// kinds lists every Kind, in wire order.
var kinds = []Kind{KindShare, KindPrefetch, KindDemote, KindRetain, KindRelease}

func (k Kind) String() string {
	switch k {
	case KindShare:
		return "share"
	case KindPrefetch:
		return "prefetch"
	case KindDemote:
		return "demote"
	case KindRetain:
		return "retain"
	case KindRelease:
		return "release_session"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ActionType is the kind's name on the wire, with its version
// (KvHintAction.action_type, HintCapability.action_type).
func (k Kind) ActionType() string { return "kv." + k.String() + "@1" }

// KindOf returns the Kind an action type names; false for a type (or a
// version) this package does not know.
func KindOf(actionType string) (Kind, bool) {
	for _, k := range kinds {
		if k.ActionType() == actionType {
			return k, true
		}
	}
	return 0, false
}

// Result is an engine's answer to one action.
type Result uint8

const (
	ResultAccepted Result = iota + 1 // done in full
	ResultClipped                    // done in part (bounds, capacity, blocks in use)
	ResultDeferred                   // queued: the engine acts when it can
	ResultRejected                   // not done (not applicable, no such blocks, malformed)
	ResultError                      // never reached the engine
)

func (r Result) String() string {
	switch r {
	case ResultAccepted:
		return "accepted"
	case ResultClipped:
		return "clipped"
	case ResultDeferred:
		return "deferred"
	case ResultRejected:
		return "rejected"
	case ResultError:
		return "error"
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// Capability is one hint kind a worker's engine acts on, with its limits.
type Capability struct {
	Kind Kind
	// MaxBlocks bounds the blocks one action may name (0: no bound).
	MaxBlocks int
	// MaxPriority is the top of the engine's retention scale (KindRetain;
	// 0 means 100, the scale Action.Priority uses).
	MaxPriority int
	// MaxTTL is the longest retention the engine honours (KindRetain; 0: no
	// bound).
	MaxTTL time.Duration
	// NextRequests: the engine takes the hint with the session's following
	// requests, session-wide (it has no call that acts on blocks already
	// cached), so an action names no blocks.
	NextRequests bool
}

// Support is what a worker's engine announced it acts on. Known is false for
// a worker that announced nothing (a shim older than the announcement): it
// is sent every action as proposed, and its engine answers for itself. A
// known Support with no capabilities acts on no hint.
type Support struct {
	Known bool
	Caps  []Capability
}

// Of returns the capability for kind k, if the engine has it.
func (s Support) Of(k Kind) (Capability, bool) {
	for _, c := range s.Caps {
		if c.Kind == k {
			return c, true
		}
	}
	return Capability{}, false
}

// Equal reports whether two announcements are the same.
func (s Support) Equal(o Support) bool { return s.Known == o.Known && slices.Equal(s.Caps, o.Caps) }

// nearest lists, for the kind a policy proposes, what may stand in for it
// on an engine that lacks it, best first. A demote keeps a session's blocks
// for its return without holding the device; an engine that cannot move
// blocks can still be asked to keep them longer (retain). Nothing stands in
// for a prefetch (an engine with a host tier of its own loads from it when
// the next request comes), a share (no engine imports blocks outside a
// request) or a release.
var nearest = map[Kind][]Kind{
	KindDemote: {KindDemote, KindRetain},
}

// Nearest is the one place that decides what a worker is sent for action a,
// given what its engine acts on: a itself when the engine has its kind,
// else the nearest kind it has (a retain at cfg.RetainPriority for
// cfg.RetainTTL in place of a demote), in either case within the
// capability's limits. ok is false when the engine acts on nothing near a:
// nothing is sent. An unknown Support takes a as it is.
func Nearest(a Action, s Support, cfg Config) (Action, bool) {
	return nearestAction(a, s, cfg.withDefaults())
}

func nearestAction(a Action, s Support, cfg Config) (out Action, ok bool) {
	if !s.Known {
		return a, true
	}
	alts := nearest[a.Kind]
	if alts == nil {
		alts = []Kind{a.Kind}
	}
	for _, k := range alts {
		c, has := s.Of(k)
		if !has {
			continue
		}
		out = a
		if k != a.Kind {
			out = standIn(a, k, cfg)
		}
		return c.limit(out), true
	}
	return a, false
}

// standIn rewrites a as kind k (a listed alternative for a.Kind).
func standIn(a Action, k Kind, cfg Config) Action {
	out := Action{Policy: a.Policy, Kind: k, Worker: a.Worker, Session: a.Session, Blocks: a.Blocks}
	if k == KindRetain {
		out.Priority, out.TTL = cfg.RetainPriority, cfg.RetainTTL
	}
	return out
}

// limit fits a to the capability.
func (c Capability) limit(a Action) Action {
	if c.NextRequests {
		a.Blocks = nil
	}
	if c.MaxBlocks > 0 && len(a.Blocks) > c.MaxBlocks {
		// A demote keeps the deepest blocks (the session's own), the others
		// the root-most (the reusable prefix), as Config.MaxBlocksPerHint.
		if a.Kind == KindDemote {
			a.Blocks = tail(a.Blocks, c.MaxBlocks)
		} else {
			a.Blocks = head(a.Blocks, c.MaxBlocks)
		}
	}
	if a.Kind == KindRetain {
		top := c.MaxPriority
		if top <= 0 {
			top = 100
		}
		a.Priority = min(max(a.Priority, 0), top)
		if c.MaxTTL > 0 && (a.TTL <= 0 || a.TTL > c.MaxTTL) {
			a.TTL = c.MaxTTL
		}
	}
	return a
}
