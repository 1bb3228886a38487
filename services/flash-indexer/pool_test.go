package flashindexer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/services/servicekit/servicetest"
)

// fakePool is a kv-pool whose subscriptions deliver scripted batches: the
// test decides what each subscriber sees, lost events included.
type fakePool struct {
	kvpoolv1.UnimplementedKvPoolServiceServer
	layout kvpool.Layout
	// first, when set, is what a subscription gets at once, as the kv-pool
	// sends a snapshot or the events after the subscriber's position (nil:
	// nothing until the test sends it).
	first func(*kvpoolv1.SubscribePoolEventsRequest) *kvpoolv1.PoolEventBatch

	mu    sync.Mutex
	subs  []*kvpoolv1.SubscribePoolEventsRequest
	feeds []chan *kvpoolv1.PoolEventBatch // one per subscription, in order
}

func (f *fakePool) SubscribePoolEvents(req *kvpoolv1.SubscribePoolEventsRequest, st grpc.ServerStreamingServer[kvpoolv1.SubscribePoolEventsResponse]) error {
	feed := make(chan *kvpoolv1.PoolEventBatch, 16)
	f.mu.Lock()
	f.subs = append(f.subs, req)
	f.feeds = append(f.feeds, feed)
	f.mu.Unlock()
	if f.first != nil {
		if b := f.first(req); b != nil {
			feed <- b
		}
	}
	for {
		select {
		case <-st.Context().Done():
			return nil
		case b := <-feed:
			if err := st.Send(&kvpoolv1.SubscribePoolEventsResponse{Batch: b}); err != nil {
				return err
			}
		}
	}
}

// send delivers b to the newest subscription. A stream the indexer has
// given up may still be open here for a moment, and a batch it took would
// be lost to the follower that is listening.
func (f *fakePool) send(t *testing.T, b *kvpoolv1.PoolEventBatch) {
	t.Helper()
	servicetest.Eventually(t, "the indexer subscribed", func() bool { return len(f.subscriptions()) > 0 })
	f.mu.Lock()
	feed := f.feeds[len(f.feeds)-1]
	f.mu.Unlock()
	feed <- b
}

func (f *fakePool) subscriptions() []*kvpoolv1.SubscribePoolEventsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*kvpoolv1.SubscribePoolEventsRequest(nil), f.subs...)
}

func (f *fakePool) keys(pages ...uint64) []string {
	var out []string
	for _, p := range pages {
		for _, o := range f.layout.Objects(nil, kv.BlockHash(p)) {
			out = append(out, f.layout.Key(o))
		}
	}
	return out
}

func (f *fakePool) stored(seq uint64, keys ...string) []*kvpoolv1.PoolEvent {
	var out []*kvpoolv1.PoolEvent
	for _, k := range keys {
		out = append(out, &kvpoolv1.PoolEvent{Sequence: seq, Type: kvpoolv1.PoolEventType_POOL_EVENT_TYPE_STORED, ObjectKey: k})
		seq++
	}
	return out
}

// shared returns worker's shared-pool extension for the prompt.
func (h *harness) shared(t *testing.T, worker string, prompt ...uint64) int {
	t.Helper()
	return int(h.overlap(t, worker, prompt...).GetSharedBeyondDeviceBlocks())
}

// The flash indexer follows the pool's stream: a snapshot, then events, a
// page counted only when all its objects arrived; a lost event clears the
// pool index and the follower comes back for a snapshot.
func TestSharedPoolEventsExtendMatches(t *testing.T) {
	pool := &fakePool{layout: kvpool.Layout{TPSize: 2}}
	poolAddr := servicetest.Serve(t, func(g *grpc.Server) { kvpoolv1.RegisterKvPoolServiceServer(g, pool) })
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1))
	h := start(t, servicetest.NewFakeScheduler(w), func(c *Config) { c.PoolAddr = poolAddr })
	servicetest.Eventually(t, "worker indexed", depthIs(t, h, "w0", 1, 1, 2, 3, 4))

	lay := &kvpoolv1.Layout{TpSize: 2}
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 4, Layout: lay, ObjectKeys: pool.keys(2)}})
	servicetest.Eventually(t, "snapshot credits page 2", func() bool { return h.shared(t, "w0", 1, 2, 3, 4) == 1 })

	// Page 3 arrives object by object: no credit until the last one.
	keys3 := pool.keys(3)
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: pool.stored(5, keys3[:3]...)})
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: pool.stored(8, pool.keys(99)...)}) // a marker batch
	servicetest.Eventually(t, "marker applied", func() bool { return h.shared(t, "w0", 1, 2, 99) == 2 })
	if got := h.shared(t, "w0", 1, 2, 3, 4); got != 1 {
		t.Fatalf("partial page 3 credited: shared %d, want 1", got)
	}
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: pool.stored(12, keys3[3])})
	servicetest.Eventually(t, "complete page 3 credited", func() bool { return h.shared(t, "w0", 1, 2, 3, 4) == 2 })

	// Sequence 13 is lost: the pool index is cleared and a fresh
	// subscription asks for a snapshot (epoch 0, sequence 0).
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: pool.stored(14, pool.keys(4)[0])})
	servicetest.Eventually(t, "resubscribed after the gap", func() bool { return len(pool.subscriptions()) >= 2 })
	if s := pool.subscriptions(); s[0].GetFromSequence() != 0 || s[1].GetEpoch() != 0 || s[1].GetFromSequence() != 0 {
		t.Fatalf("subscriptions %v: want a snapshot request after the gap", s)
	}
	if got := h.shared(t, "w0", 1, 2, 3, 4); got != 0 {
		t.Fatalf("after the gap shared = %d, want 0 until the snapshot", got)
	}
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 20, Layout: lay, ObjectKeys: pool.keys(2, 3, 4)}})
	servicetest.Eventually(t, "snapshot restores the credit", func() bool { return h.shared(t, "w0", 1, 2, 3, 4) == 3 })
}

// A pool holding more objects than the pool index may (Config.PoolMaxObjects:
// a pool of 65,536 pages at TP size 8 holds 1,048,576, past the default
// million) makes the index clear itself as it overflows. A snapshot would
// only overflow it again: the follower used to resubscribe for one after
// every such clear, a whole snapshot per pool event while the pool stayed
// full. It keeps following the stream instead, rebuilding from the events
// (as Dynamo's shared-cache indexer does); only a gap or a new epoch asks
// for a snapshot.
func TestPoolIndexOverflowKeepsFollowing(t *testing.T) {
	pool := &fakePool{layout: kvpool.Layout{TPSize: 2}}
	poolAddr := servicetest.Serve(t, func(g *grpc.Server) { kvpoolv1.RegisterKvPoolServiceServer(g, pool) })
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1))
	h := start(t, servicetest.NewFakeScheduler(w), func(c *Config) { c.PoolAddr = poolAddr; c.PoolMaxObjects = 6 })
	servicetest.Eventually(t, "worker indexed", depthIs(t, h, "w0", 1, 1, 2, 3))

	lay := &kvpoolv1.Layout{TpSize: 2}
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 4, Layout: lay, ObjectKeys: pool.keys(2)}})
	servicetest.Eventually(t, "snapshot credits page 2", func() bool { return h.shared(t, "w0", 1, 2) == 1 })
	// Pages 3 and 4 are 8 more objects: the third overflows the bound of 6
	// and the index clears; page 3's last object and page 4 remain.
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: pool.stored(5, pool.keys(3, 4)...)})
	servicetest.Eventually(t, "page 4 credited from the events", func() bool { return h.shared(t, "w0", 1, 4) == 1 })
	// And the stream goes on: a removal on it is applied.
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: []*kvpoolv1.PoolEvent{
		{Sequence: 13, Type: kvpoolv1.PoolEventType_POOL_EVENT_TYPE_REMOVED, ObjectKey: pool.keys(4)[0]}}})
	servicetest.Eventually(t, "removal applied", func() bool { return h.shared(t, "w0", 1, 4) == 0 })
	if n := len(pool.subscriptions()); n != 1 {
		t.Fatalf("%d subscriptions: an overflow asked for a snapshot", n)
	}
}

// servePool runs pool, with the gRPC health service the indexer probes, at
// addr ("" for any port); stop crashes it (connections drop).
func servePool(t *testing.T, addr string, pool *fakePool) (string, func()) {
	return servicetest.ServeAt(t, addr, func(g *grpc.Server) {
		kvpoolv1.RegisterKvPoolServiceServer(g, pool)
		healthpb.RegisterHealthServer(g, health.NewServer())
	})
}

// The pool's pages count as hits under the rule a worker's blocks do
// (--stale-after): an idle pool that answers the health probe over its
// subscription's connection keeps counting; a pool gone past the bound no
// longer does (the index may list pages it dropped, or a pool that is not
// there); back, it counts again once the pool index has caught up: from
// the events after the position it had or, when the pool has nothing new
// to send, from a snapshot asked for when it answers the probe.
func TestGonePoolStopsCountingUntilCaughtUp(t *testing.T) {
	const bound = time.Second
	lay := &kvpoolv1.Layout{TpSize: 2}
	layout := kvpool.Layout{TPSize: 2}
	for _, tc := range []struct {
		name string
		// back is what the pool that comes back sends a subscription first,
		// by what it asked (epoch 7, sequence 4: where the index was).
		back func(p *fakePool, req *kvpoolv1.SubscribePoolEventsRequest) *kvpoolv1.PoolEventBatch
		// want is the shared extension of w0's prompt 1, 2, 3 once back.
		want int
		// reloads: the indexer must ask the pool back for a snapshot.
		reloads bool
	}{
		{name: "events after its position", want: 2,
			back: func(p *fakePool, req *kvpoolv1.SubscribePoolEventsRequest) *kvpoolv1.PoolEventBatch {
				if req.GetEpoch() == 7 && req.GetFromSequence() == 4 {
					return &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: p.stored(5, p.keys(3)...)}
				}
				return &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 8, Layout: lay, ObjectKeys: p.keys(2, 3)}}
			}},
		{name: "idle: a snapshot once it answers", want: 1, reloads: true,
			back: func(p *fakePool, req *kvpoolv1.SubscribePoolEventsRequest) *kvpoolv1.PoolEventBatch {
				if req.GetFromSequence() != 0 {
					return nil // nothing after the index's position
				}
				return &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 4, Layout: lay, ObjectKeys: p.keys(2)}}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := &fakePool{layout: layout}
			poolAddr, crash := servePool(t, "", pool)
			shim, w := shimWorker(t, "w0")
			shim.Publish(stored(0, 1))
			h := start(t, servicetest.NewFakeScheduler(w), func(c *Config) { c.PoolAddr = poolAddr; c.StaleAfter = bound })
			servicetest.Eventually(t, "worker indexed", depthIs(t, h, "w0", 1, 1, 2, 3))
			pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 4, Layout: lay, ObjectKeys: pool.keys(2)}})
			servicetest.Eventually(t, "snapshot credits page 2", func() bool { return h.shared(t, "w0", 1, 2, 3) == 1 })

			// Idle but answering: counted past the bound. (Generous: a probe
			// slowed on a loaded machine must not demote it.)
			for end := time.Now().Add(2 * bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if got := h.shared(t, "w0", 1, 2, 3); got != 1 {
					t.Fatalf("idle, reachable pool: shared %d, want 1", got)
				}
			}

			crash()
			servicetest.Eventually(t, "the gone pool left out", func() bool { return h.shared(t, "w0", 1, 2, 3) == 0 })
			// The worker's own blocks still count: only the pool is stale. (A
			// loaded machine may miss the worker's probe bound too; its
			// snapshot reload then brings it back.)
			servicetest.Eventually(t, "the worker's own blocks counted", depthIs(t, h, "w0", 1, 1, 2, 3))
			if m := servicetest.Get(t, "http://"+h.http+"/metrics"); !strings.Contains(m, "switchyard_flash_indexer_pool_stale 1") ||
				!strings.Contains(m, "switchyard_flash_indexer_pool_stale_total") {
				t.Errorf("metrics do not show the pool stale")
			}

			back := &fakePool{layout: layout}
			back.first = func(req *kvpoolv1.SubscribePoolEventsRequest) *kvpoolv1.PoolEventBatch { return tc.back(back, req) }
			servePool(t, poolAddr, back)
			servicetest.Eventually(t, "the pool counts again once caught up", func() bool { return h.shared(t, "w0", 1, 2, 3) == tc.want })
			s := back.subscriptions()
			if s[0].GetEpoch() != 7 || s[0].GetFromSequence() != 4 {
				t.Fatalf("first subscription to the pool back: %v, want from epoch 7, sequence 4", s[0])
			}
			if last := s[len(s)-1]; tc.reloads && (last.GetEpoch() != 0 || last.GetFromSequence() != 0) {
				t.Fatalf("subscriptions to the pool back: %v, want the last to ask for a snapshot", s)
			}
		})
	}
}

// heldHealth is a health service that answers no probe until released: a
// probe cannot show the pool alive (and have the stale pool index reloaded
// from a snapshot) while the test holds the pool's backlog.
type heldHealth struct {
	healthpb.UnimplementedHealthServer
	release chan struct{}
}

func (h *heldHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	select {
	case <-h.release:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// A pool that comes back with a backlog longer than one batch (the kv-pool
// sends at most 4096 events a batch, the next at once while more are
// pending) is not caught up after the first batch: no worker is credited
// with its pages until the batch that ends the backlog is applied, the one
// the pool marks caught up, short or (the backlog a whole number of
// batches) full. Page 3, stored at the start of the backlog, has lost an
// object by the end of the longer backlog.
func TestPoolBackWithBacklogCountsOnlyOnceCaughtUp(t *testing.T) {
	t.Run("ends on a short batch", func(t *testing.T) { testPoolBacklog(t, false, false) })
	t.Run("ends on a full batch", func(t *testing.T) { testPoolBacklog(t, true, false) })
	// A kv-pool from before caught_up marks no batch: its short one ends
	// the backlog.
	t.Run("ends on a short batch of an older pool", func(t *testing.T) { testPoolBacklog(t, false, true) })
}

func testPoolBacklog(t *testing.T, endsFull, olderPool bool) {
	const bound = time.Second
	lay := &kvpoolv1.Layout{TpSize: 2}
	layout := kvpool.Layout{TPSize: 2}
	pool := &fakePool{layout: layout}
	poolAddr, crash := servePool(t, "", pool)
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1))
	h := start(t, servicetest.NewFakeScheduler(w), func(c *Config) { c.PoolAddr = poolAddr; c.StaleAfter = bound })
	servicetest.Eventually(t, "worker indexed", depthIs(t, h, "w0", 1, 1, 2, 3))
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 4, Layout: lay, ObjectKeys: pool.keys(2)}})
	servicetest.Eventually(t, "snapshot credits page 2", func() bool { return h.shared(t, "w0", 1, 2, 3) == 1 })
	crash()
	servicetest.Eventually(t, "the gone pool left out", func() bool { return h.shared(t, "w0", 1, 2, 3) == 0 })

	// The backlog after sequence 4: page 3 and 1,023 other pages (4,096
	// events), 1,024 more pages (4,096), then page 3 losing an object and
	// page 4 (5 events, the pool's last at 8,201).
	back := &fakePool{layout: layout}
	filler := func(from uint64, n int) []string {
		pages := make([]uint64, n)
		for i := range pages {
			pages[i] = from + uint64(i)
		}
		return back.keys(pages...)
	}
	first := &kvpoolv1.PoolEventBatch{Epoch: 7, Events: back.stored(5, append(back.keys(3), filler(1000, 1023)...)...)}
	second := &kvpoolv1.PoolEventBatch{Epoch: 7, Events: back.stored(4101, filler(3000, 1024)...)}
	last := &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: append([]*kvpoolv1.PoolEvent{
		{Sequence: 8197, Type: kvpoolv1.PoolEventType_POOL_EVENT_TYPE_REMOVED, ObjectKey: back.keys(3)[0]}},
		back.stored(8198, back.keys(4)...)...)}
	if len(first.Events) != kvpool.MaxEventsPerBatch || len(second.Events) != kvpool.MaxEventsPerBatch {
		t.Fatalf("backlog batches of %d and %d events, want kvpool.MaxEventsPerBatch", len(first.Events), len(second.Events))
	}
	back.first = func(req *kvpoolv1.SubscribePoolEventsRequest) *kvpoolv1.PoolEventBatch {
		if req.GetEpoch() == 7 && req.GetFromSequence() == 4 {
			return first
		}
		// A snapshot of the end state, should a probe have the index
		// reloaded once the health service answers.
		return &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 8201, Layout: lay,
			ObjectKeys: append(append(back.keys(2), back.keys(3)[1:]...), back.keys(4)...)}}
	}
	health := &heldHealth{release: make(chan struct{})}
	servicetest.ServeAt(t, poolAddr, func(g *grpc.Server) {
		kvpoolv1.RegisterKvPoolServiceServer(g, back)
		healthpb.RegisterHealthServer(g, health)
	})
	defer close(health.release)

	last.CaughtUp = !olderPool
	if endsFull {
		// The backlog is the two full batches: the second ends it.
		second.CaughtUp = true
		back.send(t, second)
		servicetest.Eventually(t, "the pool counts again once its last full batch is applied", func() bool {
			return h.shared(t, "w0", 1, 2, 3) == 2
		})
		return
	}
	back.send(t, second)
	// Both full batches applied, one after the other: whatever the first
	// one's application decided has been decided.
	servicetest.Eventually(t, "two full batches applied", func() bool { return testutil.ToFloat64(h.svc.pool.events) == 8192 })
	if got := h.shared(t, "w0", 1, 2, 3); got != 0 {
		t.Fatalf("two batches into a backlog of three: shared %d, want 0 (the pool index is behind the pool)", got)
	}
	back.send(t, last)
	servicetest.Eventually(t, "the pool counts again once the backlog is applied", func() bool {
		return h.shared(t, "w0", 1, 2, 4) == 2 && h.shared(t, "w0", 1, 2, 3) == 1
	})
	if s := back.subscriptions(); s[0].GetEpoch() != 7 || s[0].GetFromSequence() != 4 {
		t.Fatalf("first subscription to the pool back: %v, want from epoch 7, sequence 4", s[0])
	}
}

// A stream that stays open through a silence past the bound (the pool cut
// off, the connection kept) may then deliver batches the pool built before
// it: they do not end the staleness, even a batch that reached the pool's
// last event when built. The snapshot asked for once the pool answers the
// probe does.
func TestPoolSilentOnAnOpenStreamCountsAfterASnapshot(t *testing.T) {
	const bound = time.Second
	lay := &kvpoolv1.Layout{TpSize: 2}
	pool := &fakePool{layout: kvpool.Layout{TPSize: 2}}
	pool.first = func(req *kvpoolv1.SubscribePoolEventsRequest) *kvpoolv1.PoolEventBatch {
		if len(pool.subscriptions()) == 1 {
			return nil // the test sends the first one
		}
		return &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 12, Layout: lay, ObjectKeys: pool.keys(2, 3, 4)}}
	}
	health := &heldHealth{release: make(chan struct{})}
	poolAddr, _ := servicetest.ServeAt(t, "", func(g *grpc.Server) {
		kvpoolv1.RegisterKvPoolServiceServer(g, pool)
		healthpb.RegisterHealthServer(g, health)
	})
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1))
	h := start(t, servicetest.NewFakeScheduler(w), func(c *Config) { c.PoolAddr = poolAddr; c.StaleAfter = bound })
	servicetest.Eventually(t, "worker indexed", depthIs(t, h, "w0", 1, 1, 2, 3, 4))
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Snapshot: &kvpoolv1.PoolSnapshot{Sequence: 4, Layout: lay, ObjectKeys: pool.keys(2)}})
	servicetest.Eventually(t, "snapshot credits page 2", func() bool { return h.shared(t, "w0", 1, 2, 3, 4) == 1 })
	// No probe answered, no batch: stale past the bound.
	servicetest.Eventually(t, "the silent pool left out", func() bool { return h.shared(t, "w0", 1, 2, 3, 4) == 0 })

	// Two short batches on the open stream, the second applied after the
	// first's outcome is decided.
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: pool.stored(5, pool.keys(3)...)})
	pool.send(t, &kvpoolv1.PoolEventBatch{Epoch: 7, CaughtUp: true, Events: pool.stored(9, pool.keys(4)...)})
	servicetest.Eventually(t, "both batches applied", func() bool { return testutil.ToFloat64(h.svc.pool.events) == 8 })
	if got := h.shared(t, "w0", 1, 2, 3, 4); got != 0 {
		t.Fatalf("batches on the stream open through the silence: shared %d, want 0 until a snapshot", got)
	}
	close(health.release)
	servicetest.Eventually(t, "the pool counts again from the snapshot", func() bool { return h.shared(t, "w0", 1, 2, 3, 4) == 3 })
	if s := pool.subscriptions(); len(s) < 2 || s[len(s)-1].GetEpoch() != 0 || s[len(s)-1].GetFromSequence() != 0 {
		t.Fatalf("subscriptions %v: want the last to ask for a snapshot", s)
	}
}
