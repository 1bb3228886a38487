package kvhintemitter

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/services/servicekit"
	sessionindexer "switchyard.dev/services/session-prefix-indexer"
)

// runService starts a servicekit server with a service on loopback until
// the test ends.
func runService(t *testing.T, name string, build func(*servicekit.Server) (interface{ Run(context.Context) error }, error)) *servicekit.Server {
	t.Helper()
	srv, err := servicekit.New(servicekit.Options{Name: name, GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := build(srv)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- servicekit.Run(ctx, srv, svc.Run) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	return srv
}

// TestWithRealIndexer runs the emitter against the real session-prefix
// indexer: the shim's KV state (a session's chain extending a prefix stored
// without a session id) becomes lineage there, and the emitter names those
// blocks in its demote.
func TestWithRealIndexer(t *testing.T) {
	shim := &fakeShim{answer: kvv1.HintResult_HINT_RESULT_ACCEPTED, snapshot: []*kvv1.KvEvent{
		{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{BlockHashes: []uint64{11, 12}}}},
		{Tier: kvv1.Tier_TIER_DEVICE, SessionId: "s", Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: 12, BlockHashes: []uint64{13, 14}}}},
	}}
	shimAddr := serve(t, "", func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, shim) })
	sched := &fakeScheduler{workers: []*workerv1.Worker{{WorkerId: "w0", Address: shimAddr, Epoch: 1}}}
	schedAddr := serve(t, "", func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })

	idxCfg := sessionindexer.DefaultConfig()
	idxCfg.SchedulerAddr = schedAddr
	idx := runService(t, "session-prefix-indexer", func(srv *servicekit.Server) (interface{ Run(context.Context) error }, error) {
		return sessionindexer.New(idxCfg, srv)
	})

	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr, cfg.Tick = schedAddr, idx.GRPCAddr(), 5*time.Millisecond
	cfg.Hints.Disabled = nil // every policy, the long-tool demote included
	var svc *Service
	runService(t, "kvhint-emitter", func(srv *servicekit.Server) (interface{ Run(context.Context) error }, error) {
		s, err := New(cfg, srv)
		if s != nil {
			s.now = clk.now
		}
		svc = s
		return s, err
	})
	eventually(t, "program watch", sched.watching)
	eventually(t, "worker known", func() bool {
		svc.wmu.Lock()
		defer svc.wmu.Unlock()
		return len(svc.workers) == 1
	})

	sched.push(program("s", "", "w0", acting, active, clk.now()))
	// Until the indexer has the snapshot the lineage is empty and the
	// policy finds nothing to demote; keep starting tool calls until it
	// does (each new tool call is a new chance).
	want := &kvv1.KvHintAction{ActionType: "kv.demote@1", Payload: &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{
		SessionId: "s", Blocks: &kvv1.BlockSpan{BlockHashes: []uint64{11, 12, 13, 14}}, ToTier: kvv1.Tier_TIER_HOST}}}
	eventually(t, "demote with the indexer's lineage", func() bool {
		if len(shim.actions()) > 0 {
			return true
		}
		sched.push(program("s", "", "w0", reasoning, active, clk.now()))
		sched.push(program("s", "", "w0", acting, active, clk.now()))
		clk.add(hints.DefaultConfig().DefaultToolTime + time.Second)
		time.Sleep(10 * time.Millisecond)
		return false
	})
	if diff := cmp.Diff(want, shim.actions()[0], protocmp.Transform(), protocmp.IgnoreFields(&kvv1.KvHintAction{}, "action_id")); diff != "" {
		t.Fatalf("demote (-want +got):\n%s", diff)
	}
}
