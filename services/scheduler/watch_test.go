package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/routing"
)

func TestWatchProgramsStartsWithSnapshot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.register(t, worker("w1", 1<<20))
	for _, s := range []string{"a", "b"} {
		if _, err := h.client.Route(ctx, routeReq("r-"+s, s, 64)); err != nil {
			t.Fatal(err)
		}
	}
	recv := watchPrograms(ctx, t, h, &schedulerv1.WatchProgramsRequest{})
	seen := map[string]schedulerv1.ProgramPhase{}
	for range 2 {
		ev := recv()
		if ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING || ev.GetReason() != "snapshot" {
			t.Fatalf("snapshot event %v", ev)
		}
		seen[ev.GetProgram().GetSessionId()] = ev.GetProgram().GetPhase()
	}
	if seen["a"] != schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING || seen["b"] != schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING {
		t.Fatalf("snapshot %v", seen)
	}
	if ev := recv(); ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED || ev.GetProgram() != nil {
		t.Fatalf("want SYNCED, got %v", ev)
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("r-a", "w1", "a", 64, 10)); err != nil {
		t.Fatal(err)
	}
	ev := recv()
	if ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_CHANGED || ev.GetReason() != "acting" ||
		ev.GetProgram().GetSessionId() != "a" || ev.GetProgram().GetPhase() != schedulerv1.ProgramPhase_PROGRAM_PHASE_ACTING {
		t.Fatalf("change %v", ev)
	}
}

// A watch that names reasons gets the snapshot and only the changes with
// those reasons: here a new session's turn is left out, the finish kept.
func TestWatchProgramsFiltersByReason(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.register(t, worker("w1", 1<<20))
	if _, err := h.client.Route(ctx, routeReq("r-a", "a", 64)); err != nil {
		t.Fatal(err)
	}
	open := func(req *schedulerv1.WatchProgramsRequest) func() *schedulerv1.WatchProgramsResponse {
		recv := watchPrograms(ctx, t, h, req)
		if ev := recv(); ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING {
			t.Fatalf("want the snapshot, got %v", ev)
		}
		if ev := recv(); ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED {
			t.Fatalf("want SYNCED, got %v", ev)
		}
		return recv
	}
	all, acting := open(&schedulerv1.WatchProgramsRequest{}), open(&schedulerv1.WatchProgramsRequest{Reasons: []string{"acting"}})
	lifecycle := open(&schedulerv1.WatchProgramsRequest{ExceptReasons: []string{"reasoning", "acting"}})
	both := open(&schedulerv1.WatchProgramsRequest{Reasons: []string{"acting", "admitted"}, ExceptReasons: []string{"acting"}})
	if _, err := h.client.Route(ctx, routeReq("r-b", "b", 64)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("r-a", "w1", "a", 64, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Route(ctx, routeReq("r-a2", "a", 64)); err != nil { // a's next turn: reasoning
		t.Fatal(err)
	}
	if _, err := h.client.Route(ctx, routeReq("r-c", "c", 64)); err != nil {
		t.Fatal(err)
	}
	if ev := all(); ev.GetProgram().GetSessionId() != "b" {
		t.Fatalf("unfiltered: want b's turn first, got %v", ev)
	}
	if ev := acting(); ev.GetReason() != "acting" || ev.GetProgram().GetSessionId() != "a" {
		t.Fatalf("filtered: want a's acting, got %v", ev)
	}
	// The watch that excepts a turn's phase changes hears of b and then c
	// arriving (admitted, placed), and of neither of a's changes.
	var heard []string
	for len(heard) == 0 || heard[len(heard)-1] != "c" {
		ev := lifecycle()
		if r := ev.GetReason(); r == "reasoning" || r == "acting" || ev.GetProgram().GetSessionId() == "a" {
			t.Fatalf("excepting reasoning and acting, after %v: %v", heard, ev)
		}
		heard = append(heard, ev.GetProgram().GetSessionId())
	}
	if heard[0] != "b" {
		t.Fatalf("excepting reasoning and acting: heard %v, want b's arrival first", heard)
	}
	// Naming reasons and excepting one of them: what is named less what is
	// excepted, b's and c's admissions and not a's acting between them.
	for _, want := range []string{"b", "c"} {
		if ev := both(); ev.GetReason() != "admitted" || ev.GetProgram().GetSessionId() != want {
			t.Fatalf("reasons less except_reasons: want %s admitted, got %v", want, ev)
		}
	}
}

// watchPrograms opens a program watch and returns its next event each call.
func watchPrograms(ctx context.Context, t *testing.T, h *harness, req *schedulerv1.WatchProgramsRequest) func() *schedulerv1.WatchProgramsResponse {
	t.Helper()
	watch, err := h.client.WatchPrograms(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return func() *schedulerv1.WatchProgramsResponse {
		t.Helper()
		ev, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
}

func TestMarkPrefillCompleteDropsPrefillLoad(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.register(t, worker("w1", 1<<20))
	route := func(id string) *schedulerv1.WorkerScore {
		t.Helper()
		resp, err := h.client.Route(ctx, routeReq(id, "", 160))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetScores()[0]
	}
	route("r1")
	// r1's 10 prompt blocks are still to prefill: r2 sees them.
	if sc := route("r2"); sc.GetPrefillBlocks() != 20 || sc.GetDecodeBlocks() != 20 {
		t.Fatalf("r2 score %v", sc)
	}
	if _, err := h.client.MarkPrefillComplete(ctx, &schedulerv1.MarkPrefillCompleteRequest{RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	// Twice, and for an id the scheduler never routed: both harmless.
	for _, id := range []string{"r1", "ghost"} {
		if _, err := h.client.MarkPrefillComplete(ctx, &schedulerv1.MarkPrefillCompleteRequest{RequestId: id}); err != nil {
			t.Fatal(err)
		}
	}
	// r1 no longer counts as prefill, but its blocks stay until it finishes.
	if sc := route("r3"); sc.GetPrefillBlocks() != 20 || sc.GetDecodeBlocks() != 30 {
		t.Fatalf("r3 score %v", sc)
	}
	if _, err := h.client.FinishRequest(ctx, finishReq("r1", "w1", "", 160, 1)); err != nil {
		t.Fatal(err)
	}
	if tr := h.svc.pipe.Router().Load().Worker("w1"); tr.PrefillTokens != 320 || tr.DecodeBlocks != 20 || tr.Requests != 2 {
		t.Fatalf("tracked after finish %+v", tr)
	}
	known, unknown := testutil.ToFloat64(h.svc.metrics.prefillMarks.WithLabelValues("true")), testutil.ToFloat64(h.svc.metrics.prefillMarks.WithLabelValues("false"))
	if known != 2 || unknown != 1 {
		t.Fatalf("marks: known %v unknown %v", known, unknown)
	}
	_, err := h.client.MarkPrefillComplete(ctx, &schedulerv1.MarkPrefillCompleteRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty request id: %v", err)
	}
}

func TestWatchRouteDecisions(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.register(t, worker("w1", 1<<20), worker("w2", 1<<20))
	watch, err := h.client.WatchRouteDecisions(ctx, &schedulerv1.WatchRouteDecisionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatal(err)
	}
	h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w2", DeviceBlocks: 6})
	req := routeReq("r1", "child", 160)
	req.Agent.ParentSessionId = "root"
	if _, err := h.client.Route(ctx, req); err != nil {
		t.Fatal(err)
	}
	h.index.set(false)
	if _, err := h.client.Route(ctx, routeReq("r2", "", 160)); err != nil {
		t.Fatal(err)
	}
	ev, err := watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	d := ev.GetDecision()
	if d.GetRequestId() != "r1" || d.GetSessionId() != "child" || d.GetParentSessionId() != "root" || d.GetTenant() != "t" ||
		d.GetWorkerId() != "w2" || d.GetMatchedBlocks() != 6 || d.GetMatchedBlockHash() != 1005 || d.GetReason() != "cost" ||
		!d.GetDecidedAt().AsTime().Equal(t0) {
		t.Fatalf("decision %v", d)
	}
	if ev, err = watch.Recv(); err != nil {
		t.Fatal(err)
	}
	if d := ev.GetDecision(); d.GetRequestId() != "r2" || d.GetMatchedBlocks() != 0 || d.GetMatchedBlockHash() != 0 {
		t.Fatalf("decision without a match %v", d)
	}
}

func TestWatchRouteDecisionsEndsOnShutdown(t *testing.T) {
	h := newHarness(t, nil)
	watch, err := h.client.WatchRouteDecisions(context.Background(), &schedulerv1.WatchRouteDecisionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatal(err)
	}
	h.svc.Close()
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v, want Unavailable", err)
	}
}

func TestFanoutDropsLaggingSubscriber(t *testing.T) {
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	f := newFanout[int](dropped)
	slow, fast := f.subscribe(nil), f.subscribe(nil)
	for i := range watcherBuffer {
		f.publish(i)
		<-fast.events
	}
	if !f.active() || testutil.ToFloat64(dropped) != 0 {
		t.Fatal("dropped within its buffer")
	}
	f.publish(-1)
	select {
	case <-slow.lagged:
	default:
		t.Fatal("a full subscriber was kept")
	}
	if got := <-fast.events; got != -1 {
		t.Fatalf("fast subscriber got %d", got)
	}
	if testutil.ToFloat64(dropped) != 1 || f.n.Load() != 1 {
		t.Fatal("drop not counted")
	}
	f.unsubscribe(fast)
	if f.active() {
		t.Fatal("still active")
	}
	f.publish(1) // nobody listens: nothing blocks
}

// TestCandidatesMatchMapLookup checks the sorted-snapshot overlap placement
// against a map from worker id: unknown workers ignored, the best rank of a
// worker kept (the pipeline's tests cover admission's room).
func TestCandidatesMatchMapLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for trial := range 500 {
		reg, err := registry.New(&registry.Config{LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1 + rng.IntN(64) {
			if rng.IntN(3) > 0 {
				if _, err := reg.Register(t0, registry.Worker{ID: fmt.Sprintf("w%03d", i), Address: "a:1"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		workers := reg.Snapshot()
		if len(workers) == 0 {
			continue
		}
		var resp []*flashindexv1.WorkerOverlap
		want := map[string]routing.Overlap{}
		for range rng.IntN(80) {
			o := &flashindexv1.WorkerOverlap{WorkerId: fmt.Sprintf("w%03d", rng.IntN(70)), DeviceBlocks: uint32(rng.IntN(8)), HostExtensionBlocks: uint32(rng.IntN(4))}
			resp = append(resp, o)
			if cur, ok := want[o.GetWorkerId()]; !ok || int(o.GetDeviceBlocks()) >= cur.Device {
				want[o.GetWorkerId()] = routing.Overlap{Device: int(o.GetDeviceBlocks()), HostExt: int(o.GetHostExtensionBlocks())}
			}
		}
		buf := &routeBuf{}
		svc := &Service{reg: reg, index: oneIndexer(&staticIndex{resp: []*flashindexv1.FindMatchesResponse{{Overlaps: resp}}}), cfg: Config{FindMatchesTimeout: time.Second}}
		_, err = svc.snapshot(context.Background(), &schedulerv1.RouteRequest{BlockHashes: []uint64{1}}, chainLookup{holder: -1}, routing.PolicyKV, buf)
		if err != nil {
			t.Fatal(err)
		}
		cands := candidates(buf)
		var wantCands []routing.Candidate
		for _, w := range workers {
			wantCands = append(wantCands, candidate(w, want[w.ID]))
		}
		if diff := cmp.Diff(wantCands, cands); diff != "" {
			t.Fatalf("trial %d (-want +got):\n%s", trial, diff)
		}
	}
}

// A subscriber that wants few events is handed only those: the rest neither
// wake it nor fill its buffer, so it is not dropped for lagging behind
// events it would have thrown away.
func TestFanoutHandsASubscriberOnlyWhatItWants(t *testing.T) {
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	f := newFanout[int](dropped)
	odd := f.subscribe(func(i int) bool { return i%2 == 1 })
	for i := range 2 * watcherBuffer {
		f.publish(2 * i)
	}
	f.publish(1, 2, 3)
	select {
	case <-odd.lagged:
		t.Fatal("dropped for events it did not want")
	default:
	}
	if got := []int{<-odd.events, <-odd.events}; got[0] != 1 || got[1] != 3 || len(odd.events) != 0 {
		t.Fatalf("got %v then %d more, want [1 3]", got, len(odd.events))
	}
}
