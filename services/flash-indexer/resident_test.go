package flashindexer

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestFindResident(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2, 3))
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 3, 1, 2, 3))
	shim.Publish(stored(3, 4, 5))
	servicetest.Eventually(t, "extended", depthIs(t, h, "w0", 5, 1, 2, 3, 4, 5))
	shim.Publish(removed(2))
	servicetest.Eventually(t, "a hole", depthIs(t, h, "w0", 1, 1, 2, 3, 4, 5))

	resp, err := h.client.FindResident(context.Background(), &flashindexv1.FindResidentRequest{Queries: []*flashindexv1.ResidentQuery{
		{Anchors: []uint64{5, 1}, WorkerId: "w0"},       // the chain 1-2-3-4-5: only block 1 is a prefix now
		{Anchors: []uint64{3}, WorkerId: "w1"},          // a worker the index has no state of: it cannot tell
		{Anchors: []uint64{9, 8, 4, 1}, WorkerId: "w0"}, // blocks nobody holds, then the chain 1-2-3-4
		{Anchors: []uint64{9}, WorkerId: "w0"},          // no anchor known
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetAnswers()
	if len(a) != 4 || a[0].GetChainBlocks() != 5 || a[0].GetAnchor() != 0 || a[0].GetOverlap().GetDeviceBlocks() != 1 ||
		a[0].GetOverlap().GetWorkerId() != "w0" || a[0].GetWorkerStale() ||
		a[1].GetChainBlocks() != 3 || a[1].GetOverlap() != nil || !a[1].GetWorkerStale() ||
		a[2].GetChainBlocks() != 4 || a[2].GetAnchor() != 2 || a[2].GetOverlap().GetDeviceBlocks() != 1 ||
		a[3].GetChainBlocks() != 0 || a[3].GetOverlap() != nil {
		t.Fatalf("answers %v", a)
	}
	_, err = h.client.FindResident(context.Background(), &flashindexv1.FindResidentRequest{Queries: []*flashindexv1.ResidentQuery{{Anchors: []uint64{5}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a query without a worker: %v", err)
	}
	_, err = h.client.FindResident(context.Background(), &flashindexv1.FindResidentRequest{Queries: []*flashindexv1.ResidentQuery{
		{Anchors: make([]uint64, maxAnchors+1), WorkerId: "w0"}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a query with too many anchors: %v", err)
	}
}

// A worker whose event stream is stale: the answer says so instead of
// saying it holds nothing.
func TestFindResidentOfAStaleWorker(t *testing.T) {
	s0, w0 := probedShimWorker(t, "w0")
	s0.Publish(stored(0, 1, 2, 3))
	h := start(t, servicetest.NewFakeScheduler(w0), staleAfter(500*time.Millisecond))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 3, 1, 2, 3))
	servicetest.Eventually(t, "subscribed", func() bool { return len(s0.Calls().Subscribes) >= 1 })
	s0.Freeze()
	defer s0.Thaw()
	servicetest.Eventually(t, "stale", func() bool {
		a := resident(t, h, "w0", 3)
		return a.GetWorkerStale() && a.GetOverlap() == nil && a.GetChainBlocks() == 3
	})
}

// resident is FindResident's answer to one query.
func resident(t *testing.T, h *harness, worker string, anchors ...uint64) *flashindexv1.ResidentAnswer {
	t.Helper()
	resp, err := h.client.FindResident(context.Background(), &flashindexv1.FindResidentRequest{Queries: []*flashindexv1.ResidentQuery{
		{Anchors: anchors, WorkerId: worker}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetAnswers()[0]
}

func TestFindResidentOverREST(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 11, 12))
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 2, 11, 12))
	var got struct {
		Answers []struct {
			ChainBlocks int `json:"chainBlocks"`
			Overlap     struct {
				DeviceBlocks int `json:"deviceBlocks"`
			} `json:"overlap"`
		} `json:"answers"`
	}
	body := servicetest.PostJSON(t, "http://"+h.http+"/v1/resident", `{"queries":[{"anchors":["12","11"],"workerId":"w0"}]}`, &got)
	if len(got.Answers) != 1 || got.Answers[0].ChainBlocks != 2 || got.Answers[0].Overlap.DeviceBlocks != 2 {
		t.Fatalf("REST answer %s", body)
	}
}

// While a worker's snapshot loads (the index cleared, its blocks coming
// back event by event), or when a load ran during the lookup, FindResident
// cannot tell what a program holds there and says the worker is stale.
func TestFindResidentWhileASnapshotLoads(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2, 3))
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 3, 1, 2, 3))
	stale := func() bool { return resident(t, h, "w0", 3).GetWorkerStale() }
	if stale() {
		t.Fatal("settled: stale")
	}
	h.svc.reloads.begin("w0")
	if !stale() {
		t.Fatal("a load in progress: not stale")
	}
	h.svc.reloads.end("w0")
	if stale() {
		t.Fatal("the load over: stale")
	}

	// A load that began and ended between the lookup's two looks.
	before := h.svc.reloads.state("w0")
	h.svc.reloads.begin("w0")
	h.svc.reloads.end("w0")
	if !unsettled(before, h.svc.reloads.state("w0")) || unsettled(before, before) {
		t.Fatal("a load wholly between two looks is not seen")
	}

	// The sink brackets every snapshot load.
	seq := h.svc.reloads.state("w0").seq
	indexSink{h.svc}.Resync("w0", []kv.Event{{Kind: kv.Stored, Blocks: []kv.BlockHash{1}}})
	if st := h.svc.reloads.state("w0"); st.active != 0 || st.seq != seq+2 {
		t.Fatalf("after a Resync: %+v, want no load active and two changes past %d", st, seq)
	}
}
