package sessionindexer

import (
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/kv"
)

// tierFromProto maps the wire tier; unspecified means the GPU, as the proto
// says for hints and as engines that do not tier their cache mean it.
func tierFromProto(t kvv1.Tier) kv.Tier {
	switch t {
	case kvv1.Tier_TIER_HOST:
		return kv.TierHost
	case kvv1.Tier_TIER_DISK:
		return kv.TierDisk
	case kvv1.Tier_TIER_SHARED:
		return kv.TierShared
	}
	return kv.TierDevice
}

func hashes(v []uint64) []kv.BlockHash {
	out := make([]kv.BlockHash, len(v))
	for i, h := range v {
		out[i] = kv.BlockHash(h)
	}
	return out
}

func uint64s(v []kv.BlockHash) []uint64 {
	out := make([]uint64, len(v))
	for i, h := range v {
		out[i] = uint64(h)
	}
	return out
}

// eventFromProto converts one wire event; ok is false for an event with no
// payload (a newer kind this build does not know), which is skipped.
func eventFromProto(e *kvv1.KvEvent) (kv.Event, bool) {
	ev := kv.Event{Tier: tierFromProto(e.GetTier()), SessionID: e.GetSessionId()}
	switch p := e.GetEvent().(type) {
	case *kvv1.KvEvent_Stored:
		ev.Kind = kv.Stored
		ev.Parent = kv.BlockHash(p.Stored.GetParentHash())
		ev.Blocks = hashes(p.Stored.GetBlockHashes())
	case *kvv1.KvEvent_Removed:
		ev.Kind = kv.Removed
		ev.Blocks = hashes(p.Removed.GetBlockHashes())
	case *kvv1.KvEvent_Cleared:
		ev.Kind = kv.Cleared
	default:
		return kv.Event{}, false
	}
	return ev, true
}
