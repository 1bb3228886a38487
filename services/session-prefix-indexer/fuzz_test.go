package sessionindexer

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/sessionindex"
	"switchyard.dev/services/servicekit/kvwire"
)

// FuzzApplyBatch feeds arbitrary wire batches (what a shim, or anything
// claiming to be one, sends) through the decoder into the core: nothing may
// panic, and a refused update must leave the index consistent enough to
// answer every query.
func FuzzApplyBatch(f *testing.F) {
	seed := &kvv1.KvEventBatch{WorkerId: "w0", Epoch: 1, Sequence: 1, Events: []*kvv1.KvEvent{
		stored("a", 0, 1, 2, 3), stored("b", 2, 4),
		{Tier: kvv1.Tier_TIER_HOST, Event: &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: []uint64{3}}}},
		{Event: &kvv1.KvEvent_Cleared{Cleared: &kvv1.AllBlocksCleared{}}},
	}}
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var batch kvv1.KvEventBatch
		if proto.Unmarshal(data, &batch) != nil {
			return
		}
		idx := sessionindex.New(sessionindex.Config{MaxSessions: 4})
		now := time.Unix(0, 0)
		for _, e := range batch.GetEvents() {
			if ev, ok := kvwire.EventFromProto(e); ok {
				_ = idx.Apply("w0", ev, now)
			}
		}
		for _, s := range idx.Sessions(0) {
			_ = idx.Lineage(s.ID, "")
			_ = idx.Frontiers(s.ID)
		}
		_ = idx.Stats()
	})
}
