package flashindexer

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit/servicetest"
)

// inFleet reports whether the indexer has heard of worker from the
// scheduler's worker set.
func (h *harness) inFleet(worker string) func() bool {
	return func() bool {
		_, ok := h.svc.follower.DPRanks(worker)
		return ok
	}
}

// predictable waits until the indexer has heard of workers, the whole
// fleet, and loaded their first snapshots: loading one clears its
// predictions.
func (h *harness) predictable(t *testing.T, workers ...string) {
	t.Helper()
	servicetest.Eventually(t, "workers heard of and loaded", func() bool {
		st, err := h.client.GetStats(context.Background(), &flashindexv1.GetStatsRequest{})
		if err != nil || st.GetResyncs() < uint64(len(workers)) {
			return false
		}
		for _, w := range workers {
			if !h.inFleet(w)() {
				return false
			}
		}
		return true
	})
}

// A prediction for a worker outside the scheduler's worker set is refused
// (NOT_FOUND): kept, it showed in lookups as an overlap of a worker nobody
// runs. So is one for a worker that has left.
func TestPredictRouteRefusesUnknownWorker(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2))
	sched := servicetest.NewFakeScheduler(w)
	h := start(t, sched)
	h.predictable(t, "w0")
	ctx := context.Background()
	predict := func(worker string) error {
		_, err := h.client.PredictRoute(ctx, &flashindexv1.PredictRouteRequest{
			WorkerId: worker, BlockHashes: []uint64{1000, 1001}, Ttl: durationpb.New(time.Minute)})
		return err
	}

	if err := predict("phantom"); status.Code(err) != codes.NotFound {
		t.Fatalf("phantom worker: got %v, want NotFound", err)
	}
	resp, err := h.client.FindMatches(ctx, &flashindexv1.FindMatchesRequest{
		Query:            &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: []uint64{1000, 1001}}},
		IncludePredicted: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetOverlaps()) != 0 {
		t.Fatalf("overlaps after a refused prediction: %v", resp.GetOverlaps())
	}

	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, w)
	servicetest.Eventually(t, "w0 forgotten", func() bool { return !h.inFleet("w0")() })
	if err := predict("w0"); status.Code(err) != codes.NotFound {
		t.Fatalf("departed worker: got %v, want NotFound", err)
	}
}

// A prediction for a dp rank the worker does not have is refused
// (INVALID_ARGUMENT); a worker that announces no dp size has one rank.
func TestPredictRouteRefusesRankOutOfRange(t *testing.T) {
	_, two := shimWorker(t, "w2")
	two.DpSize = 2
	_, one := shimWorker(t, "w1") // no dp size announced
	h := start(t, servicetest.NewFakeScheduler(two, one))
	h.predictable(t, "w1", "w2")
	ctx := context.Background()

	for _, tc := range []struct {
		worker string
		rank   uint32
		want   codes.Code
	}{
		{"w2", 1, codes.OK},
		{"w2", 2, codes.InvalidArgument},
		{"w2", 4000000000, codes.InvalidArgument},
		{"w1", 0, codes.OK},
		{"w1", 1, codes.InvalidArgument},
	} {
		_, err := h.client.PredictRoute(ctx, &flashindexv1.PredictRouteRequest{
			WorkerId: tc.worker, DpRank: tc.rank, BlockHashes: []uint64{1000, 1001}})
		if status.Code(err) != tc.want {
			t.Errorf("%s rank %d: got %v, want %v", tc.worker, tc.rank, err, tc.want)
		}
	}
	st, err := h.client.GetStats(ctx, &flashindexv1.GetStatsRequest{})
	if err != nil || st.GetPredictions() != 2 {
		t.Fatalf("stats %v %v, want the 2 accepted predictions only", st, err)
	}
}
