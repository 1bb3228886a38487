package kvwire

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/kv"
)

func TestEventRoundTrip(t *testing.T) {
	for _, ev := range []kv.Event{
		{Kind: kv.Stored, Tier: kv.TierDevice, Parent: 7, Blocks: []kv.BlockHash{8, 9}, SessionID: "s1"},
		{Kind: kv.Stored, Tier: kv.TierHost, Blocks: []kv.BlockHash{1}, DPRank: 2},
		{Kind: kv.Removed, Tier: kv.TierDisk, Blocks: []kv.BlockHash{1, 1 << 63}},
		{Kind: kv.Removed, Tier: kv.TierShared, Blocks: []kv.BlockHash{3}},
		{Kind: kv.Cleared, Tier: kv.TierDevice},
	} {
		got, ok := EventFromProto(EventToProto(ev))
		if !ok {
			t.Fatalf("%v: dropped", ev)
		}
		if diff := cmp.Diff(ev, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func TestUnknownKindIsSkipped(t *testing.T) {
	evs := EventsFromProto([]*kvv1.KvEvent{{Tier: kvv1.Tier_TIER_HOST}, EventToProto(kv.Event{Kind: kv.Cleared})})
	if len(evs) != 1 || evs[0].Kind != kv.Cleared {
		t.Fatalf("got %v, want only the cleared event", evs)
	}
}

func TestUnspecifiedTierIsDevice(t *testing.T) {
	if TierFromProto(kvv1.Tier_TIER_UNSPECIFIED) != kv.TierDevice {
		t.Fatal("unspecified tier must mean the GPU")
	}
}

// Every tier has a wire form of its own and comes back from it.
func TestTiersRoundTrip(t *testing.T) {
	seen := map[kvv1.Tier]bool{}
	for tier := range kv.Tier(kv.NumTiers) {
		w := TierToProto(tier)
		if w == kvv1.Tier_TIER_UNSPECIFIED || seen[w] || TierFromProto(w) != tier {
			t.Errorf("tier %v ↔ %v", tier, w)
		}
		seen[w] = true
	}
}
