// Package kvwire converts the KV vocabulary of pkg/kv to and from its protobuf
// form (switchyard.kv.v1). Every service that sends or receives KV events or
// tiers converts through it, so the mapping is written once.
package kvwire

import (
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/kv"
)

// wireTiers is every tier's wire form, both ways. Unspecified, and anything
// else unknown, means the GPU, as it does for engines that do not tier their
// cache.
var wireTiers = [kv.NumTiers]kvv1.Tier{
	kv.TierDevice: kvv1.Tier_TIER_DEVICE,
	kv.TierHost:   kvv1.Tier_TIER_HOST,
	kv.TierDisk:   kvv1.Tier_TIER_DISK,
	kv.TierShared: kvv1.Tier_TIER_SHARED,
}

// TierFromProto maps a wire tier.
func TierFromProto(t kvv1.Tier) kv.Tier {
	for k, w := range wireTiers {
		if w == t {
			return kv.Tier(k)
		}
	}
	return kv.TierDevice
}

// TierToProto maps a tier to the wire.
func TierToProto(t kv.Tier) kvv1.Tier {
	if t.Valid() {
		return wireTiers[t]
	}
	return kvv1.Tier_TIER_DEVICE
}

// Hashes converts wire block hashes.
func Hashes(v []uint64) []kv.BlockHash {
	if len(v) == 0 {
		return nil
	}
	out := make([]kv.BlockHash, len(v))
	for i, h := range v {
		out[i] = kv.BlockHash(h)
	}
	return out
}

// Uint64s converts block hashes for the wire.
func Uint64s(v []kv.BlockHash) []uint64 {
	if len(v) == 0 {
		return nil
	}
	out := make([]uint64, len(v))
	for i, h := range v {
		out[i] = uint64(h)
	}
	return out
}

// EventFromProto converts one wire event. ok is false for an event with no
// payload (a kind newer than this build), which callers skip.
func EventFromProto(e *kvv1.KvEvent) (ev kv.Event, ok bool) {
	ev = kv.Event{Tier: TierFromProto(e.GetTier()), SessionID: e.GetSessionId(), DPRank: e.GetDpRank()}
	switch p := e.GetEvent().(type) {
	case *kvv1.KvEvent_Stored:
		ev.Kind = kv.Stored
		ev.Parent = kv.BlockHash(p.Stored.GetParentHash())
		ev.Blocks = Hashes(p.Stored.GetBlockHashes())
	case *kvv1.KvEvent_Removed:
		ev.Kind = kv.Removed
		ev.Blocks = Hashes(p.Removed.GetBlockHashes())
	case *kvv1.KvEvent_Cleared:
		ev.Kind = kv.Cleared
	default:
		return kv.Event{}, false
	}
	return ev, true
}

// EventsFromProto converts a batch, skipping events of unknown kinds.
func EventsFromProto(list []*kvv1.KvEvent) []kv.Event {
	out := make([]kv.Event, 0, len(list))
	for _, e := range list {
		if ev, ok := EventFromProto(e); ok {
			out = append(out, ev)
		}
	}
	return out
}

// EventToProto converts one event for the wire.
func EventToProto(e kv.Event) *kvv1.KvEvent {
	out := &kvv1.KvEvent{SessionId: e.SessionID, DpRank: e.DPRank, Tier: TierToProto(e.Tier)}
	switch e.Kind {
	case kv.Stored:
		out.Event = &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: uint64(e.Parent), BlockHashes: Uint64s(e.Blocks)}}
	case kv.Removed:
		out.Event = &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: Uint64s(e.Blocks)}}
	case kv.Cleared:
		// Cleared is every tier at once.
		out.Event = &kvv1.KvEvent_Cleared{Cleared: &kvv1.AllBlocksCleared{}}
		out.Tier = kvv1.Tier_TIER_UNSPECIFIED
	}
	return out
}

// EventsToProto converts a batch for the wire.
func EventsToProto(evs []kv.Event) []*kvv1.KvEvent {
	out := make([]*kvv1.KvEvent, len(evs))
	for i, e := range evs {
		out[i] = EventToProto(e)
	}
	return out
}
