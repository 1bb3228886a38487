package flashindexer

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
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
		{Tip: 5, WorkerId: "w0"}, // the chain 1-2-3-4-5: only block 1 is a prefix now
		{Tip: 3, WorkerId: "w1"}, // a worker that holds none of it
		{Tip: 9, WorkerId: "w0"}, // a block nobody holds
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetAnswers()
	if len(a) != 3 || a[0].GetChainBlocks() != 5 || a[0].GetOverlap().GetDeviceBlocks() != 1 || a[0].GetOverlap().GetWorkerId() != "w0" ||
		a[1].GetChainBlocks() != 3 || a[1].GetOverlap() != nil || a[2].GetChainBlocks() != 0 || a[2].GetOverlap() != nil {
		t.Fatalf("answers %v", a)
	}
	_, err = h.client.FindResident(context.Background(), &flashindexv1.FindResidentRequest{Queries: []*flashindexv1.ResidentQuery{{Tip: 5}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a query without a worker: %v", err)
	}
}
