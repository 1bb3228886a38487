package sessionindexer

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
	"switchyard.dev/services/servicekit"
)

// TestRouteHitsWaitForTheWorkersEvents drives the service's handlers
// directly on a fake clock: a decision that runs ahead of the worker's KV
// events waits for them, expires when they never come, and the backlog is
// capped.
func TestRouteHitsWaitForTheWorkersEvents(t *testing.T) {
	srv, err := servicekit.New(servicekit.Options{Name: "session-prefix-indexer", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.MatchWait, cfg.MatchBacklog = time.Second, 2
	s, err := New(cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	decide := func(session string, block uint64) {
		s.routed(&schedulerv1.RouteDecision{SessionId: session, WorkerId: "w", MatchedBlockHash: block})
	}
	lineage := func(session string) []sessionindex.Chain {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.idx.Lineage(session, "")
	}
	count := func(result string) float64 { return testutil.ToFloat64(s.m.matches.WithLabelValues(result)) }
	hs := func(v ...kv.BlockHash) []kv.BlockHash { return v }

	// The scheduler saw blocks 1-2 on w (from the flash indexer) before
	// this indexer did: the hit waits.
	decide("s", 2)
	if got := lineage("s"); got != nil {
		t.Fatalf("applied ahead of the events: %v", got)
	}
	s.apply("w", []kv.Event{{Kind: kv.Stored, Blocks: hs(1, 2)}})
	if diff := cmp.Diff([]sessionindex.Chain{{Worker: "w", Blocks: hs(1, 2)}}, lineage("s")); diff != "" {
		t.Fatal(diff)
	}
	if count("applied_late") != 1 {
		t.Fatal("late hit not counted")
	}

	// Hits with nothing to record are ignored.
	decide("", 2)
	decide("s", 0)
	if len(s.pending) != 0 {
		t.Fatalf("pending %v", s.pending)
	}

	// Three hits that never arrive: the backlog keeps the newest two, and
	// they expire after MatchWait.
	decide("a", 7)
	decide("b", 8)
	decide("c", 9)
	if count("dropped") != 1 || len(s.pending["w"]) != 2 || s.pending["w"][0].session != "b" {
		t.Fatalf("backlog %v", s.pending)
	}
	now = now.Add(2 * time.Second)
	s.apply("w", nil)
	if count("expired") != 2 || len(s.pending) != 0 {
		t.Fatalf("expiry: %v expired, pending %v", count("expired"), s.pending)
	}

	// A worker that leaves takes its waiting hits along.
	decide("d", 5)
	s.clearWorker("w")
	if len(s.pending) != 0 {
		t.Fatalf("pending after clear %v", s.pending)
	}
}

// A hit that waited past --match-wait is expired, even when the batch that
// ends its wait is the one that makes its block resident: a worker that
// comes back much later (a restart reloads its snapshot, with the shared
// prefixes every session reuses) must not have hits from long ago, of
// sessions that may have moved on, applied as new lineage.
func TestRouteHitsPastTheWaitAreNotApplied(t *testing.T) {
	srv, err := servicekit.New(servicekit.Options{Name: "session-prefix-indexer", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.MatchWait = time.Second
	s, err := New(cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	s.routed(&schedulerv1.RouteDecision{SessionId: "s", WorkerId: "w", MatchedBlockHash: 2})

	now = now.Add(time.Minute)
	s.resync("w", []kv.Event{{Kind: kv.Stored, Blocks: []kv.BlockHash{1, 2}}})
	s.mu.Lock()
	got := s.idx.Lineage("s", "")
	s.mu.Unlock()
	if got != nil {
		t.Fatalf("a hit a minute old was applied: %v", got)
	}
	if n := testutil.ToFloat64(s.m.matches.WithLabelValues("expired")); n != 1 {
		t.Fatalf("expired %v, want 1", n)
	}
}
