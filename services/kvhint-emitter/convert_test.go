package kvhintemitter

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
)

func TestActionToProto(t *testing.T) {
	span := &kvv1.BlockSpan{BlockHashes: []uint64{1, 2}}
	tests := []struct {
		in   hints.Action
		want *kvv1.KvHintAction
	}{
		{hints.Action{Kind: hints.KindShare, Session: "s", Blocks: []kv.BlockHash{1, 2}, SourceWorker: "w1", SourceTier: kv.TierHost},
			&kvv1.KvHintAction{ActionId: "m/0", ActionType: "kv.share@1", Payload: &kvv1.KvHintAction_Share{Share: &kvv1.ShareHint{SessionId: "s", Blocks: span, SourceWorkerId: "w1", SourceTier: kvv1.Tier_TIER_HOST}}}},
		{hints.Action{Kind: hints.KindPrefetch, Session: "s", Blocks: []kv.BlockHash{1, 2}, ToTier: kv.TierDevice},
			&kvv1.KvHintAction{ActionId: "m/0", ActionType: "kv.prefetch@1", Payload: &kvv1.KvHintAction_Prefetch{Prefetch: &kvv1.PrefetchHint{SessionId: "s", Blocks: span, ToTier: kvv1.Tier_TIER_DEVICE}}}},
		{hints.Action{Kind: hints.KindDemote, Session: "s", Blocks: []kv.BlockHash{1, 2}, ToTier: kv.TierDisk},
			&kvv1.KvHintAction{ActionId: "m/0", ActionType: "kv.demote@1", Payload: &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{SessionId: "s", Blocks: span, ToTier: kvv1.Tier_TIER_DISK}}}},
		{hints.Action{Kind: hints.KindRetain, Session: "s", Blocks: []kv.BlockHash{1, 2}, TTL: time.Minute, Priority: 250},
			&kvv1.KvHintAction{ActionId: "m/0", ActionType: "kv.retain@1", Payload: &kvv1.KvHintAction_Retain{Retain: &kvv1.RetainHint{SessionId: "s", Blocks: span, Priority: 100, TtlSeconds: 60}}}},
		{hints.Action{Kind: hints.KindRelease, Session: "s"},
			&kvv1.KvHintAction{ActionId: "m/0", ActionType: "kv.release_session@1", Payload: &kvv1.KvHintAction_ReleaseSession{ReleaseSession: &kvv1.ReleaseSessionHint{SessionId: "s"}}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, actionToProto("m/0", tt.in), protocmp.Transform()); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tt.in.Kind, diff)
		}
	}
}
