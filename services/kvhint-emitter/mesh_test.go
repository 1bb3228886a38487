package kvhintemitter

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
	sessionindexer "switchyard.dev/services/session-prefix-indexer"
)

// TestWithRealIndexer runs the emitter against the real session-prefix
// indexer: the shim's KV state (a session's chain extending a prefix stored
// without a session id) becomes lineage there, and the emitter names those
// blocks in its demote.
func TestWithRealIndexer(t *testing.T) {
	shim := &fakeShim{answer: kvv1.HintResult_HINT_RESULT_ACCEPTED, snapshot: []*kvv1.KvEvent{
		{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{BlockHashes: []uint64{11, 12}}}},
		{Tier: kvv1.Tier_TIER_DEVICE, SessionId: "s", Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: 12, BlockHashes: []uint64{13, 14}}}},
	}}
	sched := servicetest.NewFakeScheduler(&workerv1.Worker{WorkerId: "w0", Address: servicetest.Serve(t, shim.Register), Epoch: 1})
	schedAddr := servicetest.Serve(t, sched.Register)

	idxCfg := sessionindexer.DefaultConfig()
	idxCfg.SchedulerAddr = schedAddr
	idx, _ := servicetest.Start(t, servicekit.Options{Name: "session-prefix-indexer"},
		func(srv *servicekit.Server) (*sessionindexer.Service, error) { return sessionindexer.New(idxCfg, srv) })

	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	cfg := DefaultConfig()
	cfg.SchedulerAddr, cfg.SessionIndexerAddr, cfg.Tick = schedAddr, idx.Server.GRPCAddr(), 5*time.Millisecond
	cfg.Hints.Disabled = nil // every policy, the long-tool demote included
	_, svc := startEmitter(t, cfg, clk)
	watching(t, sched, svc, 1)

	sched.SetProgram(program("s", "", "w0", acting, active, clk.now()))
	// Until the indexer has the snapshot the lineage is empty and the
	// policy finds nothing to demote; keep starting tool calls until it
	// does (each new tool call is a new chance).
	want := &kvv1.KvHintAction{ActionType: "kv.demote@1", Payload: &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{
		SessionId: "s", Blocks: &kvv1.BlockSpan{BlockHashes: []uint64{11, 12, 13, 14}}, ToTier: kvv1.Tier_TIER_HOST}}}
	servicetest.Eventually(t, "demote with the indexer's lineage", func() bool {
		if len(shim.actions()) > 0 {
			return true
		}
		sched.SetProgram(program("s", "", "w0", reasoning, active, clk.now()))
		sched.SetProgram(program("s", "", "w0", acting, active, clk.now()))
		clk.add(hints.DefaultConfig().DefaultToolTime + time.Second)
		time.Sleep(10 * time.Millisecond)
		return false
	})
	if diff := cmp.Diff(want, shim.actions()[0], protocmp.Transform(), protocmp.IgnoreFields(&kvv1.KvHintAction{}, "action_id")); diff != "" {
		t.Fatalf("demote (-want +got):\n%s", diff)
	}
}
