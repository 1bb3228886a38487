package sessionindexer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestMain(m *testing.M) { servicetest.VerifyNoLeaks(m) }

type harness struct {
	client sessionindexv1.SessionPrefixIndexerServiceClient
	http   string
	svc    *Service
}

func startService(t *testing.T, schedAddr string) *harness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SchedulerAddr = schedAddr
	cfg.Backoff = servicekit.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}
	run, svc := servicetest.Start(t, servicekit.Options{Name: "session-prefix-indexer", HTTPAddr: "127.0.0.1:0"},
		func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	return &harness{client: sessionindexv1.NewSessionPrefixIndexerServiceClient(run.Conn), http: run.Server.HTTPAddr(), svc: svc}
}

// stored is a device-tier BlocksStored event of session.
func stored(session string, parent uint64, blocks ...uint64) *kvv1.KvEvent {
	ev := servicetest.Stored(parent, blocks...)
	ev.SessionId = session
	return ev
}

func (h *harness) lineage(t *testing.T, session string) []*sessionindexv1.Lineage {
	resp, err := h.client.GetSessionLineage(context.Background(), &sessionindexv1.GetSessionLineageRequest{SessionId: session})
	switch status.Code(err) {
	case codes.NotFound:
		return nil
	case codes.Unavailable: // not caught up: a lineage no test wants
		return []*sessionindexv1.Lineage{{WorkerId: "(not caught up)"}}
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetLineages()
}

// caughtUp waits until the indexer answers lineage reads.
func (h *harness) caughtUp(t *testing.T) {
	t.Helper()
	servicetest.Eventually(t, "caught up", func() bool { return h.svc.follower.CaughtUp() })
}

func lineageIs(t *testing.T, h *harness, session string, want ...*sessionindexv1.Lineage) func() bool {
	return func() bool { return cmp.Diff(want, h.lineage(t, session), protocmp.Transform()) == "" }
}

func TestFollowsWorkersAndEvents(t *testing.T) {
	shim := servicetest.NewFakeShim("w0")
	shim.Publish(stored("a", 0, 1, 2, 3))
	shimAddr := servicetest.Serve(t, shim.Register)

	// The indexer starts first; the scheduler comes up later on its port.
	schedAddr := servicetest.FreeAddr(t)
	h := startService(t, schedAddr)
	sched := servicetest.NewFakeScheduler(&workerv1.Worker{WorkerId: "w0", Address: shimAddr, Epoch: 1})
	sched.RewatchPrograms(&schedulerv1.Program{SessionId: "child", ParentSessionId: "a"}) // a sub-agent of a
	servicetest.ServeAt(t, schedAddr, sched.Register)

	// Snapshot first.
	servicetest.Eventually(t, "lineage of a from the snapshot", lineageIs(t, h, "a", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3}}))

	// Then live events: a sub-agent extends its parent's prefix.
	shim.Publish(stored("child", 2, 7, 8))
	servicetest.Eventually(t, "child lineage", lineageIs(t, h, "child", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2, 7, 8}}))
	resp, err := h.client.GetSessionLineage(context.Background(), &sessionindexv1.GetSessionLineageRequest{SessionId: "child"})
	if err != nil || resp.GetParentSessionId() != "a" {
		t.Fatalf("parent of child: %v, %v", resp, err)
	}

	// A route decision: session r's prompt hit a's prefix 1-2 on w0.
	servicetest.Eventually(t, "route watch", func() bool { return sched.RouteWatches() > 0 })
	sched.Decide(&schedulerv1.RouteDecision{SessionId: "r", WorkerId: "w0", MatchedBlocks: 2, MatchedBlockHash: 2})
	servicetest.Eventually(t, "r's lineage from its route", lineageIs(t, h, "r", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2}}))

	// A lost batch: the next one shows a gap and the snapshot is reloaded,
	// which carries the lost event too.
	shim.PublishLost(stored("b", 3, 4))
	shim.Publish(stored("c", 0, 9))
	servicetest.Eventually(t, "b from the resync", lineageIs(t, h, "b", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3, 4}}))
	servicetest.Eventually(t, "c after the resync", lineageIs(t, h, "c", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{9}}))

	// Demoted to host then dropped from GPU: lineage stays. Gone entirely:
	// it recedes.
	shim.Publish(
		&kvv1.KvEvent{Tier: kvv1.Tier_TIER_HOST, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: 2, BlockHashes: []uint64{7, 8}}}},
		&kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: []uint64{8, 7}}}},
		&kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: []uint64{9}}}},
	)
	servicetest.Eventually(t, "c receded", lineageIs(t, h, "c"))
	if got := h.lineage(t, "child"); len(got) != 1 || len(got[0].GetBlockHashes()) != 4 {
		t.Fatalf("child lost lineage on demotion: %v", got)
	}

	// REST through the gateway, and metrics.
	body := servicetest.Get(t, "http://"+h.http+"/v1/sessions/child/lineage")
	var js struct {
		SessionID string `json:"sessionId"`
		Lineages  []struct {
			WorkerID string `json:"workerId"`
		} `json:"lineages"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil || js.SessionID != "child" || len(js.Lineages) != 1 || js.Lineages[0].WorkerID != "w0" {
		t.Fatalf("REST lineage: %s (%v)", body, err)
	}
	// A session id holding '/' (a client's header names it as it likes),
	// in the path escaped or not, the worker filter from the query.
	shim.Publish(stored("team/a/agent-1", 0, 20))
	servicetest.Eventually(t, "team/a/agent-1's lineage", lineageIs(t, h, "team/a/agent-1", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{20}}))
	for _, path := range []string{"/v1/sessions/team%2Fa%2Fagent-1/lineage", "/v1/sessions/team/a/agent-1/lineage?worker_id=w0"} {
		body := servicetest.Get(t, "http://"+h.http+path)
		if err := json.Unmarshal([]byte(body), &js); err != nil || js.SessionID != "team/a/agent-1" || len(js.Lineages) != 1 || js.Lineages[0].WorkerID != "w0" {
			t.Fatalf("REST lineage of GET %s: %s (%v)", path, body, err)
		}
	}
	if m := servicetest.Get(t, "http://"+h.http+"/metrics"); !strings.Contains(m, "switchyard_session_prefix_indexer_sessions ") ||
		!strings.Contains(m, `switchyard_session_prefix_indexer_resyncs_total{reason="gap"} 1`) {
		t.Fatalf("metrics missing:\n%s", m)
	}
	if m := servicetest.Get(t, "http://"+h.http+"/metrics"); !strings.Contains(m, `switchyard_session_prefix_indexer_route_matches_total{result="applied"} 1`) {
		t.Fatalf("route match not counted:\n%s", m)
	}
	list, err := h.client.ListSessions(context.Background(), &sessionindexv1.ListSessionsRequest{Limit: 2})
	if err != nil || len(list.GetSessions()) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}

	// The worker leaves: its lineage goes with it.
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, &workerv1.Worker{WorkerId: "w0"})
	servicetest.Eventually(t, "lineage cleared", lineageIs(t, h, "a"))
	st, err := h.client.GetStats(context.Background(), &sessionindexv1.GetStatsRequest{})
	if err != nil || st.GetNodes() != 0 || st.GetFrontiers() != 0 || st.GetEventsApplied() == 0 {
		t.Fatalf("stats %v %v", st, err)
	}
}

func TestShimRestartNewEpoch(t *testing.T) {
	shim := servicetest.NewFakeShim("w0")
	shim.Publish(stored("a", 0, 1, 2))
	shimAddr, stopShim := servicetest.ServeAt(t, "", shim.Register)
	sched := servicetest.NewFakeScheduler(&workerv1.Worker{WorkerId: "w0", Address: shimAddr})
	h := startService(t, servicetest.Serve(t, sched.Register))
	servicetest.Eventually(t, "a", lineageIs(t, h, "a", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2}}))

	// The shim restarts on the same address with an empty cache.
	stopShim()
	shim2 := servicetest.NewFakeShim("w0")
	shim2.Restart() // epoch 2
	shim2.Publish(stored("b", 0, 5))
	servicetest.ServeAt(t, shimAddr, shim2.Register)
	shim2.Publish(stored("b", 5, 6))
	servicetest.Eventually(t, "b after restart", lineageIs(t, h, "b", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{5, 6}}))
	servicetest.Eventually(t, "a gone with the old epoch", lineageIs(t, h, "a"))
}

func TestErrors(t *testing.T) {
	h := startService(t, servicetest.Serve(t, servicetest.NewFakeScheduler().Register))
	h.caughtUp(t)
	for _, tt := range []struct {
		req  *sessionindexv1.GetSessionLineageRequest
		code codes.Code
	}{
		{&sessionindexv1.GetSessionLineageRequest{}, codes.InvalidArgument},
		{&sessionindexv1.GetSessionLineageRequest{SessionId: "nobody"}, codes.NotFound},
	} {
		if _, err := h.client.GetSessionLineage(context.Background(), tt.req); status.Code(err) != tt.code {
			t.Errorf("%v: %v, want %v", tt.req, err, tt.code)
		}
	}
}

// Until the indexer has heard the worker set and loaded each worker's
// snapshot it does not know the sessions' lineage: it says so with
// UNAVAILABLE (the hint emitter decides again next round) rather than
// answering NOT_FOUND or found=false, which the hint policies take for "no
// lineage: nothing to demote or bring back" and settle for good. Once
// caught up it answers.
func TestLineageUnavailableUntilCaughtUp(t *testing.T) {
	schedAddr := servicetest.FreeAddr(t)
	h := startService(t, schedAddr)
	ctx := context.Background()
	if _, err := h.client.GetSessionLineage(ctx, &sessionindexv1.GetSessionLineageRequest{SessionId: "a"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetSessionLineage before catching up: %v, want Unavailable", err)
	}
	batch := &sessionindexv1.GetSessionLineagesRequest{Queries: []*sessionindexv1.LineageQuery{{SessionId: "a"}}}
	if _, err := h.client.GetSessionLineages(ctx, batch); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetSessionLineages before catching up: %v, want Unavailable", err)
	}

	sh := servicetest.NewFakeShim("w0")
	sh.Publish(stored("a", 0, 1))
	servicetest.ServeAt(t, schedAddr, servicetest.NewFakeScheduler(&workerv1.Worker{WorkerId: "w0", Address: servicetest.Serve(t, sh.Register)}).Register)
	servicetest.Eventually(t, "caught up", func() bool {
		_, err := h.client.GetSessionLineages(ctx, batch)
		return err == nil
	})
	// Caught up means the worker's snapshot is in.
	resp, err := h.client.GetSessionLineage(ctx, &sessionindexv1.GetSessionLineageRequest{SessionId: "a"})
	if err != nil || len(resp.GetLineages()) != 1 {
		t.Fatalf("after catching up: %v, %v", resp, err)
	}
}

// With no scheduler at all the API still answers and shutdown is clean
// (goleak checks nothing is left behind).
func TestServesWithPeersDown(t *testing.T) {
	h := startService(t, servicetest.FreeAddr(t))
	resp, err := h.client.ListSessions(context.Background(), &sessionindexv1.ListSessionsRequest{})
	if err != nil || len(resp.GetSessions()) != 0 {
		t.Fatalf("list: %v %v", resp, err)
	}
}

// A scheduler restart that no longer knows a worker: after the new watch's
// SYNCED marker, the worker's lineage is dropped; the other worker's stays.
func TestSchedulerRestartForgetsVanishedWorkers(t *testing.T) {
	var workers []*workerv1.Worker
	for i, id := range []string{"w0", "w1"} {
		sh := servicetest.NewFakeShim(id)
		sh.Publish(stored("a", 0, uint64(i+1)))
		workers = append(workers, &workerv1.Worker{WorkerId: id, Address: servicetest.Serve(t, sh.Register)})
	}
	sched := servicetest.NewFakeScheduler(workers...)
	schedAddr, stopSched := servicetest.ServeAt(t, "", sched.Register)
	h := startService(t, schedAddr)
	servicetest.Eventually(t, "both workers", lineageIs(t, h, "a",
		&sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1}},
		&sessionindexv1.Lineage{WorkerId: "w1", BlockHashes: []uint64{2}}))

	stopSched()
	servicetest.ServeAt(t, schedAddr, servicetest.NewFakeScheduler(workers[1]).Register)
	servicetest.Eventually(t, "w0 forgotten", lineageIs(t, h, "a", &sessionindexv1.Lineage{WorkerId: "w1", BlockHashes: []uint64{2}}))
}
