package scheduler

import (
	"context"
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
			want := &flashindexv1.PredictRouteRequest{WorkerId: resp.GetWorkerId(), BlockHashes: hashes(10)}
			if len(h.index.predicted) != 1 {
				t.Fatalf("PredictRoute calls: %v", h.index.predicted)
			}
			got := h.index.predicted[0]
			if got.GetWorkerId() != want.GetWorkerId() || len(got.GetBlockHashes()) != 10 || got.GetBlockHashes()[9] != want.GetBlockHashes()[9] ||
				got.GetTtl().AsDuration() != tc.ttl {
				t.Fatalf("PredictRoute %v, want worker %s, 10 blocks, ttl %v", got, want.GetWorkerId(), tc.ttl)
			}
		})
	}
}
