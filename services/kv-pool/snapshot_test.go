package kvpoolservice

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/services/servicekit/kvwire"
)

// A new subscriber's first message holds the whole pool: a pool that can
// hold more than one gRPC message carries (64 MiB: about three million
// objects) could never be followed once full, its snapshot refused with
// RESOURCE_EXHAUSTED at every resubscription. Such a capacity is refused
// at start.
func TestCapacityFitsOneSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"default", DefaultConfig(), true},
		{"1 M pages, TP 1", Config{CapacityPages: 1 << 20, TPSize: 1, ReplayEvents: 1}, true},
		{"2 M pages, TP 1", Config{CapacityPages: 2 << 20, TPSize: 1, ReplayEvents: 1}, false},
		{"256 Ki pages, TP 8", Config{CapacityPages: 256 << 10, TPSize: 8, ReplayEvents: 1}, false},
		{"long prefix", Config{CapacityPages: 1 << 20, TPSize: 1, KeyPrefix: strings.Repeat("p", 20), ReplayEvents: 1}, false},
	} {
		if err := tc.cfg.validate(); (err == nil) != tc.ok {
			t.Errorf("%s: validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// snapshotBytes bounds what a full pool's first message takes: checked
// against the message itself, for a pool filled with its longest keys.
func TestSnapshotBytesBoundsTheMessage(t *testing.T) {
	for _, cfg := range []Config{
		{CapacityPages: 50, TPSize: 1},
		{CapacityPages: 7, TPSize: 200, KeyPrefix: strings.Repeat("x", 130)},
	} {
		l := kvpool.Layout{TPSize: cfg.TPSize, KeyPrefix: cfg.KeyPrefix}
		store, err := kvpool.New(kvpool.Config{Layout: l, Capacity: cfg.CapacityPages * l.ObjectsPerPage()})
		if err != nil {
			t.Fatal(err)
		}
		for p := range cfg.CapacityPages {
			store.Put(kv.BlockHash(^uint64(p)))
		}
		batch := &kvpoolv1.PoolEventBatch{Epoch: ^uint64(0), Snapshot: &kvpoolv1.PoolSnapshot{Sequence: ^uint64(0), Layout: kvwire.PoolLayoutToProto(l)}}
		for _, o := range store.Objects() {
			batch.Snapshot.ObjectKeys = append(batch.Snapshot.ObjectKeys, l.Key(o))
		}
		evs := store.TakeEvents()
		for _, ev := range evs[:min(len(evs), kvpool.MaxEventsPerBatch)] {
			ev.Seq = ^uint64(0)
			batch.Events = append(batch.Events, kvwire.PoolEventToProto(l, ev))
		}
		got := proto.Size(&kvpoolv1.SubscribePoolEventsResponse{Batch: batch})
		if bound := cfg.snapshotBytes(); got > bound {
			t.Errorf("%+v: message of %d bytes, bound %d", cfg, got, bound)
		}
	}
}
