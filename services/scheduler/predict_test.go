package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
)

func (f *fakeIndex) PredictRoute(_ context.Context, req *flashindexv1.PredictRouteRequest) (*flashindexv1.PredictRouteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.predicted = append(f.predicted, proto.Clone(req).(*flashindexv1.PredictRouteRequest))
	return &flashindexv1.PredictRouteResponse{}, nil
}

func TestPredictOnRoute(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"off by default", 0}, {"on", 3 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.PredictOnRouteTTL = tc.ttl })
			h.register(t, worker("w1", 1<<20))
			resp, err := h.client.Route(context.Background(), routeReq("r1", "s", 160))
			if err != nil {
				t.Fatal(err)
			}
			h.index.mu.Lock()
			defer h.index.mu.Unlock()
			if tc.ttl == 0 {
				if len(h.index.predicted) != 0 || h.index.withPredicted != 0 {
					t.Fatalf("predicted %v, %d lookups with predictions", h.index.predicted, h.index.withPredicted)
				}
				return
			}
			if h.index.withPredicted != 1 {
				t.Fatalf("%d of %d lookups asked for predictions", h.index.withPredicted, h.index.queries)
			}
			want := &flashindexv1.PredictRouteRequest{RequestId: "r1", WorkerId: resp.GetWorkerId(), BlockHashes: hashes(10)}
			if len(h.index.predicted) != 1 {
				t.Fatalf("PredictRoute calls: %v", h.index.predicted)
			}
			got := h.index.predicted[0]
			if got.GetWorkerId() != want.GetWorkerId() || len(got.GetBlockHashes()) != 10 || got.GetBlockHashes()[9] != want.GetBlockHashes()[9] ||
				got.GetTtl().AsDuration() != tc.ttl || got.GetRequestId() != want.GetRequestId() {
				t.Fatalf("PredictRoute %v, want request %s, worker %s, 10 blocks, ttl %v", got, want.GetRequestId(), want.GetWorkerId(), tc.ttl)
			}
		})
	}
}

// A warm prompt crosses to the indexer as what its worker does not hold
// yet: the blocks past the worker's real device prefix (a prediction's own
// blocks are not held), with first_block saying where they start, for the
// DP rank that holds that prefix; a prompt held whole is not sent at all.
func TestPredictOnRouteSendsOnlyNewBlocks(t *testing.T) {
	for _, tc := range []struct {
		name                string
		device, predicted   uint32
		wantCalls, wantFrom int
	}{
		{"six held, two of eight only predicted", 8, 2, 1, 6},
		{"held whole", 10, 0, 0, 0},
		// A skewed indexer's answer: no more than the device prefix can
		// be only predicted (Route panicked, after placing the turn).
		{"more predicted than held", 3, 5, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.PredictOnRouteTTL = 3 * time.Second })
			h.register(t, worker("w1", 1<<20))
			h.index.set(false, &flashindexv1.WorkerOverlap{WorkerId: "w1", DpRank: 1, DeviceBlocks: tc.device, PredictedDeviceBlocks: tc.predicted})
			if _, err := h.client.Route(context.Background(), routeReq("r1", "s", 160)); err != nil {
				t.Fatal(err)
			}
			h.index.mu.Lock()
			defer h.index.mu.Unlock()
			if len(h.index.predicted) != tc.wantCalls {
				t.Fatalf("PredictRoute calls %v, want %d", h.index.predicted, tc.wantCalls)
			}
			if tc.wantCalls == 0 {
				return
			}
			got, all := h.index.predicted[0], hashes(10)
			if got.GetDpRank() != 1 {
				t.Fatalf("PredictRoute of rank %d, want 1: the rank whose prefix is its base", got.GetDpRank())
			}
			if int(got.GetFirstBlock()) != tc.wantFrom || !slices.Equal(got.GetBlockHashes(), all[tc.wantFrom:]) {
				t.Fatalf("PredictRoute from %d: %v, want from %d: %v", got.GetFirstBlock(), got.GetBlockHashes(), tc.wantFrom, all[tc.wantFrom:])
			}
		})
	}
}
