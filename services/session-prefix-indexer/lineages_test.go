package sessionindexer

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/servicetest"
)

// GetSessionLineages answers every query of a batch in order, with each
// chain's shared count: what the hint emitter reads once per round.
func TestGetSessionLineages(t *testing.T) {
	h := startService(t, servicetest.Serve(t, servicetest.NewFakeScheduler().Register))
	h.caughtUp(t)
	t0 := time.Unix(1_700_000_000, 0)
	h.svc.mu.Lock()
	for _, u := range []struct {
		s, w   string
		parent kv.BlockHash
		blocks []kv.BlockHash
	}{
		{"a", "w0", 0, []kv.BlockHash{1, 2, 3}},
		{"child", "w0", 2, []kv.BlockHash{7, 8}}, // branches from a after 1-2
		{"a", "w1", 0, []kv.BlockHash{1, 2}},
	} {
		if err := h.svc.idx.UpdateFromStored(u.s, u.w, u.parent, u.blocks, t0); err != nil {
			t.Fatal(err)
		}
	}
	h.svc.idx.SetParent("child", "a", t0)
	h.svc.mu.Unlock()

	resp, err := h.client.GetSessionLineages(context.Background(), &sessionindexv1.GetSessionLineagesRequest{Queries: []*sessionindexv1.LineageQuery{
		{SessionId: "child", WorkerId: "w0"},
		{SessionId: "nobody"},
		{SessionId: "a"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := &sessionindexv1.GetSessionLineagesResponse{Results: []*sessionindexv1.SessionLineage{
		{SessionId: "child", Found: true, ParentSessionId: "a", Lineages: []*sessionindexv1.Lineage{
			{WorkerId: "w0", BlockHashes: []uint64{1, 2, 7, 8}, SharedBlocks: 2}}},
		{SessionId: "nobody"},
		{SessionId: "a", Found: true, Lineages: []*sessionindexv1.Lineage{
			{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3}, SharedBlocks: 2},
			// 1-2 is a's chain on w0 too: shared, even though it is a's own.
			{WorkerId: "w1", BlockHashes: []uint64{1, 2}, SharedBlocks: 2}}},
	}}
	if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name, want string
		req        *sessionindexv1.GetSessionLineagesRequest
	}{
		{"a query without a session", "session_id is required", &sessionindexv1.GetSessionLineagesRequest{Queries: []*sessionindexv1.LineageQuery{{SessionId: "a"}, {}}}},
		{"too many queries", "too many lineage queries: 4097, at most 4096", &sessionindexv1.GetSessionLineagesRequest{Queries: make([]*sessionindexv1.LineageQuery, MaxLineageQueries+1)}},
	} {
		if tt.name == "too many queries" {
			for i := range tt.req.Queries {
				tt.req.Queries[i] = &sessionindexv1.LineageQuery{SessionId: "a"}
			}
		}
		if _, err := h.client.GetSessionLineages(context.Background(), tt.req); status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tt.want {
			t.Errorf("%s: %v, want InvalidArgument %q", tt.name, err, tt.want)
		}
	}

	// The REST route.
	var js struct {
		Results []struct {
			Found    bool `json:"found"`
			Lineages []struct {
				Shared int `json:"sharedBlocks"`
			} `json:"lineages"`
		} `json:"results"`
	}
	body := servicetest.PostJSON(t, "http://"+h.http+"/v1/lineages", `{"queries":[{"session_id":"child"}]}`, &js)
	if len(js.Results) != 1 || !js.Results[0].Found || len(js.Results[0].Lineages) != 1 || js.Results[0].Lineages[0].Shared != 2 {
		t.Fatalf("REST: %s", body)
	}
}
