package scheduler

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// FuzzRouteFinish feeds the Route and FinishRequest handlers arbitrary
// requests (they come from the network) and checks that every answer is a
// worker or a clean status, never a panic, and that finishing every routed
// request leaves no load behind. The flash indexer's answer is fuzzed too:
// it crosses the network as well.
func FuzzRouteFinish(f *testing.F) {
	f.Add("r1", "s", "", "t", uint32(16), uint32(160), uint32(10), "", false, uint32(50), uint32(5), uint32(0), "")
	f.Add("", "", "", "", uint32(0), uint32(0), uint32(0), "session_aware", true, uint32(0), uint32(0), uint32(0), "w1")
	f.Add("r2", "s", "p", "t", uint32(1), uint32(1<<31), uint32(200), "round_robin", false, uint32(1<<31), uint32(1<<31), uint32(300), "w2")
	f.Fuzz(func(t *testing.T, id, session, parent, tenant string, blockSize, prompt, nHashes uint32, policy string, final bool, pt, ct, predicted uint32, exclude string) {
		// The indexer's answer is outside input too: overlaps past the
		// prompt, more predicted than held, workers it does not know.
		idx := &staticIndex{resp: []*flashindexv1.FindMatchesResponse{{Overlaps: []*flashindexv1.WorkerOverlap{
			{WorkerId: "w1", DeviceBlocks: nHashes, HostExtensionBlocks: 3, PredictedDeviceBlocks: predicted}, {WorkerId: "ghost", DeviceBlocks: 9}}}}}
		cfg := DefaultConfig()
		cfg.Seed = 1
		s, err := newService(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
			func(n string) string { return "switchyard_scheduler_" + n }, WithFlashIndexer(idx))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		for _, w := range []string{"w1", "w2"} {
			if _, err := s.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: worker(w, 1<<16)}); err != nil {
				t.Fatal(err)
			}
		}
		agent := &agentv1.AgentContext{SessionId: session, ParentSessionId: parent, Tenant: tenant, SessionFinal: final}
		req := &schedulerv1.RouteRequest{RequestId: id, Agent: agent, BlockSize: blockSize,
			BlockHashes: hashes(int(nHashes % 512)), PromptTokens: prompt, Policy: policy, ExcludeWorkers: []string{exclude}}
		// A paused program must not block the fuzzer, and how far an input
		// runs must not depend on the machine's speed (a deadline would
		// cut a slow run short): a closed service refuses a turn that
		// would wait for admission (UNAVAILABLE) at once, and routes every
		// other as a live one does. (A cancelled context would not be
		// placed at all.)
		s.Close()
		resp, err := s.Route(ctx, req)
		if err != nil {
			switch status.Code(err) {
			case codes.InvalidArgument, codes.Unavailable, codes.ResourceExhausted:
			default:
				t.Fatalf("Route: unexpected %v", err)
			}
		} else if w := resp.GetWorkerId(); w != "w1" && w != "w2" || w == exclude {
			t.Fatalf("routed to %q (excluding %q)", w, exclude)
		}
		_, err = s.FinishRequest(ctx, &schedulerv1.FinishRequestRequest{RequestId: id, Agent: agent,
			Usage: &enginev1.Usage{PromptTokens: pt, CompletionTokens: ct}})
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("FinishRequest: %v", err)
		}
		if n := s.pipe.Router().Load().Len(); n != 0 {
			t.Fatalf("%d requests still in flight after finishing", n)
		}
	})
}
