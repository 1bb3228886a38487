package flashindexer

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/servicekit/servicetest"
)

// probedShimWorker is shimWorker with the gRPC health service, which the
// indexer probes, answering from the fake (and hanging while it is frozen).
func probedShimWorker(t *testing.T, id string) (*servicetest.FakeShim, *workerv1.Worker) {
	shim := servicetest.NewFakeShim(id)
	addr := servicetest.Serve(t, func(g *grpc.Server) {
		shim.Register(g)
		shim.RegisterHealth(g)
	})
	return shim, &workerv1.Worker{WorkerId: id, Address: addr, Epoch: 1}
}

func staleAfter(d time.Duration) func(*Config) { return func(c *Config) { c.StaleAfter = d } }

// A shim the indexer cannot reach without the connection breaking (a
// partition, a stopped process) keeps serving from its cache, which the
// index no longer sees change: past --stale-after the worker is left out of
// FindMatches, and it comes back only from a fresh snapshot.
func TestUnreachableWorkerIsLeftOutUntilItsSnapshotReloads(t *testing.T) {
	s0, w0 := probedShimWorker(t, "w0")
	s1, w1 := probedShimWorker(t, "w1")
	s0.Publish(stored(0, 1, 2, 3))
	s1.Publish(stored(0, 1, 2))
	// A bound generous enough that w1's probes, slowed on a loaded machine,
	// keep it fresh while w0 turns stale (as in the test below).
	h := start(t, servicetest.NewFakeScheduler(w0, w1), staleAfter(1500*time.Millisecond))
	servicetest.Eventually(t, "both loaded", func() bool { return h.depth(t, "w0", 1, 2, 3) == 3 && h.depth(t, "w1", 1, 2, 3) == 2 })
	servicetest.Eventually(t, "subscribed", func() bool { return len(s0.Calls().Subscribes) >= 1 })

	s0.Freeze()
	// Meanwhile the worker evicts blocks 2 and 3, which the index cannot
	// learn.
	s0.Publish(removed(2, 3))
	servicetest.Eventually(t, "w0 left out", depthIs(t, h, "w0", 0, 1, 2, 3))
	if got := h.depth(t, "w1", 1, 2, 3); got != 2 {
		t.Fatalf("w1, still reachable, reports %d blocks, want 2", got)
	}
	dump, err := h.client.DumpWorker(context.Background(), &flashindexv1.DumpWorkerRequest{WorkerId: "w0"})
	if err != nil || len(dump.GetEvents()) == 0 {
		t.Fatalf("the stale worker's entries are kept (only not counted): %v %v", dump, err)
	}

	snapsBefore := s0.Calls().Snapshots
	s0.Thaw()
	servicetest.Eventually(t, "w0 back, as its snapshot says", depthIs(t, h, "w0", 1, 1, 2, 3))
	if snaps := s0.Calls().Snapshots; snaps <= snapsBefore {
		t.Fatalf("w0 counted again without a snapshot reload (%d snapshots, %d before the thaw)", snaps, snapsBefore)
	}
	s0.Publish(stored(1, 5))
	servicetest.Eventually(t, "live events after the reload", depthIs(t, h, "w0", 2, 1, 5))
}

// An idle worker sends no batch for a long time; the probe keeps it fresh.
// (The bound is generous so a slow probe on a loaded machine cannot demote
// it; the wait is three bounds.)
func TestIdleReachableWorkerStaysCounted(t *testing.T) {
	const bound = time.Second
	s0, w0 := probedShimWorker(t, "w0")
	s0.Publish(stored(0, 1, 2))
	h := start(t, servicetest.NewFakeScheduler(w0), staleAfter(bound))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 2, 1, 2))
	for end := time.Now().Add(3 * bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got := h.depth(t, "w0", 1, 2); got != 2 {
			t.Fatalf("idle, reachable worker reported %d blocks, want 2", got)
		}
	}
}
