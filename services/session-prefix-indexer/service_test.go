package sessionindexer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/servicekit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go's and net/http's pooled connections wind down on their own.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// freeAddr reserves a loopback port and releases it, so a peer can be
// started there later (the mesh starts in any order).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// eventually polls f until it returns true; the deadline only guards
// against a hang, it measures nothing.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type harness struct {
	client sessionindexv1.SessionPrefixIndexerServiceClient
	http   string
	svc    *Service
}

func startService(t *testing.T, schedAddr string) *harness {
	t.Helper()
	srv, err := servicekit.New(servicekit.Options{Name: "session-prefix-indexer", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SchedulerAddr = schedAddr
	cfg.BackoffMin, cfg.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	svc, err := New(cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- servicekit.Run(ctx, srv, svc.Run) }()
	conn, err := servicekit.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return &harness{client: sessionindexv1.NewSessionPrefixIndexerServiceClient(conn), http: srv.HTTPAddr(), svc: svc}
}

func (h *harness) lineage(t *testing.T, session string) []*sessionindexv1.Lineage {
	resp, err := h.client.GetSessionLineage(context.Background(), &sessionindexv1.GetSessionLineageRequest{SessionId: session})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetLineages()
}

func lineageIs(t *testing.T, h *harness, session string, want ...*sessionindexv1.Lineage) func() bool {
	return func() bool { return cmp.Diff(want, h.lineage(t, session), protocmp.Transform()) == "" }
}

func TestFollowsWorkersAndEvents(t *testing.T) {
	shim := newFakeShim("w0")
	shim.publish(false, stored("a", 0, 1, 2, 3))
	shimAddr, _ := serve(t, "", func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, shim) })

	// The indexer starts first; the scheduler comes up later on its port.
	schedAddr := freeAddr(t)
	h := startService(t, schedAddr)
	sched := newFakeScheduler()
	sched.workers["w0"] = &workerv1.Worker{WorkerId: "w0", Address: shimAddr, Epoch: 1}
	serve(t, schedAddr, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })

	// Snapshot first.
	eventually(t, "lineage of a from the snapshot", lineageIs(t, h, "a", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3}}))

	// Then live events: a sub-agent extends its parent's prefix.
	shim.publish(false, stored("child", 2, 7, 8))
	eventually(t, "child lineage", lineageIs(t, h, "child", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2, 7, 8}}))
	resp, err := h.client.GetSessionLineage(context.Background(), &sessionindexv1.GetSessionLineageRequest{SessionId: "child"})
	if err != nil || resp.GetParentSessionId() != "a" {
		t.Fatalf("parent of child: %v, %v", resp, err)
	}

	// A route decision: session r's prompt hit a's prefix 1-2 on w0.
	eventually(t, "route watch", sched.watchingRoutes)
	sched.route(&schedulerv1.RouteDecision{SessionId: "r", WorkerId: "w0", MatchedBlocks: 2, MatchedBlockHash: 2})
	eventually(t, "r's lineage from its route", lineageIs(t, h, "r", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2}}))

	// A lost batch: the next one shows a gap and the snapshot is reloaded,
	// which carries the lost event too.
	shim.publish(true, stored("b", 3, 4))
	shim.publish(false, stored("c", 0, 9))
	eventually(t, "b from the resync", lineageIs(t, h, "b", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3, 4}}))
	eventually(t, "c after the resync", lineageIs(t, h, "c", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{9}}))

	// Demoted to host then dropped from GPU: lineage stays. Gone entirely:
	// it recedes.
	shim.publish(false,
		&kvv1.KvEvent{Tier: kvv1.Tier_TIER_HOST, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: 2, BlockHashes: []uint64{7, 8}}}},
		&kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: []uint64{8, 7}}}},
		&kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: []uint64{9}}}},
	)
	eventually(t, "c receded", lineageIs(t, h, "c"))
	if got := h.lineage(t, "child"); len(got) != 1 || len(got[0].GetBlockHashes()) != 4 {
		t.Fatalf("child lost lineage on demotion: %v", got)
	}

	// REST through the gateway, and metrics.
	body := httpGet(t, "http://"+h.http+"/v1/sessions/child/lineage")
	var js struct {
		SessionID string `json:"sessionId"`
		Lineages  []struct {
			WorkerID string `json:"workerId"`
		} `json:"lineages"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil || js.SessionID != "child" || len(js.Lineages) != 1 || js.Lineages[0].WorkerID != "w0" {
		t.Fatalf("REST lineage: %s (%v)", body, err)
	}
	if m := httpGet(t, "http://"+h.http+"/metrics"); !strings.Contains(m, "switchyard_session_prefix_indexer_sessions ") ||
		!strings.Contains(m, `switchyard_session_prefix_indexer_resyncs_total{reason="gap"} 1`) {
		t.Fatalf("metrics missing:\n%s", m)
	}
	if m := httpGet(t, "http://"+h.http+"/metrics"); !strings.Contains(m, `switchyard_session_prefix_indexer_route_matches_total{result="applied"} 1`) {
		t.Fatalf("route match not counted:\n%s", m)
	}
	list, err := h.client.ListSessions(context.Background(), &sessionindexv1.ListSessionsRequest{Limit: 2})
	if err != nil || len(list.GetSessions()) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}

	// The worker leaves: its lineage goes with it.
	sched.set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, &workerv1.Worker{WorkerId: "w0"})
	eventually(t, "lineage cleared", lineageIs(t, h, "a"))
	st, err := h.client.GetStats(context.Background(), &sessionindexv1.GetStatsRequest{})
	if err != nil || st.GetNodes() != 0 || st.GetFrontiers() != 0 || st.GetEventsApplied() == 0 {
		t.Fatalf("stats %v %v", st, err)
	}
}

func TestShimRestartNewEpoch(t *testing.T) {
	shim := newFakeShim("w0")
	shim.publish(false, stored("a", 0, 1, 2))
	shimAddr, stopShim := serve(t, "", func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, shim) })
	sched := newFakeScheduler()
	sched.workers["w0"] = &workerv1.Worker{WorkerId: "w0", Address: shimAddr}
	schedAddr, _ := serve(t, "", func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	h := startService(t, schedAddr)
	eventually(t, "a", lineageIs(t, h, "a", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1, 2}}))

	// The shim restarts on the same address with an empty cache.
	stopShim()
	shim2 := newFakeShim("w0")
	shim2.epoch = 2
	shim2.publish(false, stored("b", 0, 5))
	serve(t, shimAddr, func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, shim2) })
	shim2.publish(false, stored("b", 5, 6))
	eventually(t, "b after restart", lineageIs(t, h, "b", &sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{5, 6}}))
	eventually(t, "a gone with the old epoch", lineageIs(t, h, "a"))
}

func TestErrors(t *testing.T) {
	sched := newFakeScheduler()
	schedAddr, _ := serve(t, "", func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	h := startService(t, schedAddr)
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

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// With no scheduler at all the API still answers and shutdown is clean
// (goleak checks nothing is left behind).
func TestServesWithPeersDown(t *testing.T) {
	h := startService(t, freeAddr(t))
	resp, err := h.client.ListSessions(context.Background(), &sessionindexv1.ListSessionsRequest{})
	if err != nil || len(resp.GetSessions()) != 0 {
		t.Fatalf("list: %v %v", resp, err)
	}
}

// A scheduler restart that no longer knows a worker: after the new watch's
// SYNCED marker, the worker's lineage is dropped; the other worker's stays.
func TestSchedulerRestartForgetsVanishedWorkers(t *testing.T) {
	shims := map[string]*fakeShim{"w0": newFakeShim("w0"), "w1": newFakeShim("w1")}
	shims["w0"].publish(false, stored("a", 0, 1))
	shims["w1"].publish(false, stored("a", 0, 2))
	sched := newFakeScheduler()
	for id, sh := range shims {
		addr, _ := serve(t, "", func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, sh) })
		sched.workers[id] = &workerv1.Worker{WorkerId: id, Address: addr}
	}
	schedAddr, stopSched := serve(t, "", func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	h := startService(t, schedAddr)
	eventually(t, "both workers", lineageIs(t, h, "a",
		&sessionindexv1.Lineage{WorkerId: "w0", BlockHashes: []uint64{1}},
		&sessionindexv1.Lineage{WorkerId: "w1", BlockHashes: []uint64{2}}))

	stopSched()
	sched2 := newFakeScheduler()
	sched2.workers["w1"] = sched.workers["w1"]
	serve(t, schedAddr, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched2) })
	eventually(t, "w0 forgotten", lineageIs(t, h, "a", &sessionindexv1.Lineage{WorkerId: "w1", BlockHashes: []uint64{2}}))
}
