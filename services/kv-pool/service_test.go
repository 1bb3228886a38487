package kvpoolservice

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestMain(m *testing.M) { servicetest.VerifyNoLeaks(m) }

type harness struct {
	client kvpoolv1.KvPoolServiceClient
	http   string
	svc    *Service
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	run, svc := servicetest.Start(t, servicekit.Options{Name: "kv-pool", HTTPAddr: "127.0.0.1:0"},
		func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	return &harness{client: kvpoolv1.NewKvPoolServiceClient(run.Conn), http: run.Server.HTTPAddr(), svc: svc}
}

// follow subscribes and returns a function that reads the next batch.
func (h *harness) follow(t *testing.T, ctx context.Context, epoch, from uint64) func() *kvpoolv1.PoolEventBatch {
	t.Helper()
	st, err := h.client.SubscribePoolEvents(ctx, &kvpoolv1.SubscribePoolEventsRequest{Epoch: epoch, FromSequence: from})
	if err != nil {
		t.Fatal(err)
	}
	return func() *kvpoolv1.PoolEventBatch {
		t.Helper()
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return m.GetBatch()
	}
}

func TestWritesReadsAndEventStream(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TPSize, cfg.CapacityPages = 2, 3
	h := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := kvpool.Layout{TPSize: 2}

	// A new subscriber gets a snapshot (empty) first.
	next := h.follow(t, ctx, 0, 0)
	b := next()
	if b.GetSnapshot() == nil || len(b.GetSnapshot().GetObjectKeys()) != 0 || b.GetSnapshot().GetLayout().GetTpSize() != 2 {
		t.Fatalf("first message %v, want an empty snapshot with TP size 2", b)
	}
	epoch := b.GetEpoch()

	if _, err := h.client.PutPages(ctx, &kvpoolv1.PutPagesRequest{PageHashes: []uint64{1, 2}}); err != nil {
		t.Fatal(err)
	}
	var got []kvpool.Event
	for len(got) < 8 {
		for _, e := range next().GetEvents() {
			ev, err := kvwire.PoolEventFromProto(l, e)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev)
		}
	}
	for i, ev := range got {
		if ev.Seq != uint64(i+1) || ev.Kind != kv.Stored || ev.Object.Page != kv.BlockHash(1+i/4) {
			t.Fatalf("event %d = %+v", i, ev)
		}
	}
	resp, err := h.client.GetPrefix(ctx, &kvpoolv1.GetPrefixRequest{PageHashes: []uint64{1, 2, 3}})
	if err != nil || resp.GetPages() != 2 {
		t.Fatalf("GetPrefix = %v, %v; want 2 pages", resp, err)
	}
	// One object gone: page 1 is no longer a hit.
	if r, err := h.client.RemoveObjects(ctx, &kvpoolv1.RemoveObjectsRequest{ObjectKeys: []string{l.Key(kvpool.Object{Page: 1, Rank: 1, Part: kvpool.PartV})}}); err != nil || r.GetRemoved() != 1 {
		t.Fatalf("RemoveObjects = %v, %v", r, err)
	}
	if resp, _ := h.client.GetPrefix(ctx, &kvpoolv1.GetPrefixRequest{PageHashes: []uint64{1, 2}}); resp.GetPages() != 0 {
		t.Fatalf("GetPrefix after a removal = %d pages, want 0", resp.GetPages())
	}
	if ev := next().GetEvents(); len(ev) != 1 || ev[0].GetType() != kvpoolv1.PoolEventType_POOL_EVENT_TYPE_REMOVED || ev[0].GetSequence() != 9 {
		t.Fatalf("removal event %v", ev)
	}

	// A subscriber that resumes from sequence 4 gets events 5.. and no snapshot.
	b = h.follow(t, ctx, epoch, 4)()
	if b.GetSnapshot() != nil || b.GetEvents()[0].GetSequence() != 5 {
		t.Fatalf("resume from 4: %v", b)
	}
	// One from another epoch gets a snapshot of the 7 objects left.
	b = h.follow(t, ctx, epoch+2, 4)()
	if b.GetSnapshot() == nil || b.GetSnapshot().GetSequence() != 9 || len(b.GetSnapshot().GetObjectKeys()) != 7 {
		t.Fatalf("other epoch: %v", b)
	}

	st, err := h.client.GetStats(ctx, &kvpoolv1.GetStatsRequest{})
	if err != nil || st.GetEpoch() != epoch || st.GetSequence() != 9 || st.GetObjects() != 7 || st.GetCompletePages() != 1 || st.GetCapacityObjects() != 12 {
		t.Fatalf("stats %v, %v", st, err)
	}
	// The REST gateway serves the unary calls.
	if body := servicetest.Get(t, "http://"+h.http+"/v1/pool/stats"); !strings.Contains(body, `"completePages":"1"`) {
		t.Fatalf("GET /v1/pool/stats: %s", body)
	}
}

// A backlog is sent in full batches and the batch that reaches the pool's
// last event says so, also when the backlog is a whole number of batches
// (its last batch full): a follower counts the pool's pages once it has
// applied that batch (the flash indexer's pool staleness).
func TestBacklogsLastBatchSaysCaughtUp(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TPSize, cfg.CapacityPages, cfg.ReplayEvents = 1, 8192, 10_000
	h := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Two objects a page at TP size 1: events 1 to 8,194.
	pages := make([]uint64, kvpool.MaxEventsPerBatch+1)
	for i := range pages {
		pages[i] = uint64(i + 1)
	}
	if _, err := h.client.PutPages(ctx, &kvpoolv1.PutPagesRequest{PageHashes: pages}); err != nil {
		t.Fatal(err)
	}
	st, err := h.client.GetStats(ctx, &kvpoolv1.GetStatsRequest{})
	if err != nil || st.GetSequence() != 2*kvpool.MaxEventsPerBatch+2 {
		t.Fatalf("stats %v, %v; want sequence %d", st, err, 2*kvpool.MaxEventsPerBatch+2)
	}
	if b := h.follow(t, ctx, 0, 0)(); b.GetSnapshot() == nil || !b.GetCaughtUp() {
		t.Fatalf("a snapshot's batch: snapshot %t, caught up %t; want both", b.GetSnapshot() != nil, b.GetCaughtUp())
	}
	// From sequence 2: two full batches, the second the pool's last.
	next := h.follow(t, ctx, st.GetEpoch(), 2)
	for i, want := range []bool{false, true} {
		b := next()
		if len(b.GetEvents()) != kvpool.MaxEventsPerBatch || b.GetCaughtUp() != want {
			t.Fatalf("backlog batch %d: %d events, caught up %t; want %d, %t", i+1, len(b.GetEvents()), b.GetCaughtUp(), kvpool.MaxEventsPerBatch, want)
		}
	}
	// A new event on the live stream: a short batch, caught up.
	if _, err := h.client.PutPages(ctx, &kvpoolv1.PutPagesRequest{PageHashes: []uint64{1 << 40}}); err != nil {
		t.Fatal(err)
	}
	if b := next(); len(b.GetEvents()) != 2 || !b.GetCaughtUp() {
		t.Fatalf("live batch: %d events, caught up %t; want 2, true", len(b.GetEvents()), b.GetCaughtUp())
	}
}

// A subscriber too far behind the replay buffer gets a snapshot instead.
func TestSubscriberBehindTheBufferGetsASnapshot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReplayEvents, cfg.CapacityPages = 4, 100
	h := start(t, cfg)
	ctx := context.Background()
	for p := range uint64(5) {
		if _, err := h.client.PutPages(ctx, &kvpoolv1.PutPagesRequest{PageHashes: []uint64{p + 1}}); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := h.client.GetStats(ctx, &kvpoolv1.GetStatsRequest{})
	b := h.follow(t, ctx, st.GetEpoch(), 1)()
	if b.GetSnapshot() == nil || b.GetSnapshot().GetSequence() != 10 || len(b.GetSnapshot().GetObjectKeys()) != 10 {
		t.Fatalf("from 1 with a buffer of 4: %v", b)
	}
}

func TestBadInput(t *testing.T) {
	h := start(t, DefaultConfig())
	ctx := context.Background()
	for _, keys := range [][]string{{"nope"}, {"0000000000000001_1_k"}, {"0000000000000001_0_x"}} {
		_, err := h.client.PutObjects(ctx, &kvpoolv1.PutObjectsRequest{ObjectKeys: keys})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("PutObjects(%v): %v, want InvalidArgument", keys, err)
		}
	}
	if _, err := New(Config{CapacityPages: 0, TPSize: 1, ReplayEvents: 1}, nil); err == nil {
		t.Error("capacity 0 accepted")
	}
}
