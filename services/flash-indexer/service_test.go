package flashindexer

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestMain(m *testing.M) { servicetest.VerifyNoLeaks(m) }

// stored and removed are device-tier events of blocks.
var stored, removed = servicetest.Stored, servicetest.Removed

type harness struct {
	client flashindexv1.FlashIndexerServiceClient
	http   string
	svc    *Service
}

func start(t *testing.T, sched *servicetest.FakeScheduler, opts ...func(*Config)) *harness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SchedulerAddr = servicetest.Serve(t, sched.Register)
	cfg.Backoff = servicekit.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	run, svc := servicetest.Start(t, servicekit.Options{Name: "flash-indexer", HTTPAddr: "127.0.0.1:0", Logger: testLogger()},
		func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	return &harness{client: flashindexv1.NewFlashIndexerServiceClient(run.Conn), http: run.Server.HTTPAddr(), svc: svc}
}

func shimWorker(t *testing.T, id string) (*servicetest.FakeShim, *workerv1.Worker) {
	shim := servicetest.NewFakeShim(id)
	return shim, &workerv1.Worker{WorkerId: id, Address: servicetest.Serve(t, shim.Register), Epoch: 1}
}

// overlap returns worker's overlap with the prompt (empty when it has none).
func (h *harness) overlap(t *testing.T, worker string, prompt ...uint64) *flashindexv1.WorkerOverlap {
	t.Helper()
	resp, err := h.client.FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{
		Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: prompt}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range resp.GetOverlaps() {
		if o.GetWorkerId() == worker {
			return o
		}
	}
	return nil
}

// depth returns worker's device overlap with the prompt.
func (h *harness) depth(t *testing.T, worker string, prompt ...uint64) int {
	t.Helper()
	return int(h.overlap(t, worker, prompt...).GetDeviceBlocks())
}

func depthIs(t *testing.T, h *harness, worker string, want int, prompt ...uint64) func() bool {
	return func() bool { return h.depth(t, worker, prompt...) == want }
}

func TestSnapshotThenLiveEvents(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2, 3))
	h := start(t, servicetest.NewFakeScheduler(w))

	servicetest.Eventually(t, "snapshot applied", depthIs(t, h, "w0", 3, 1, 2, 3, 4, 5))
	shim.Publish(stored(3, 4, 5))
	servicetest.Eventually(t, "live batch applied", depthIs(t, h, "w0", 5, 1, 2, 3, 4, 5))
	shim.Publish(removed(4, 5))
	servicetest.Eventually(t, "removal applied", depthIs(t, h, "w0", 3, 1, 2, 3, 4, 5))

	st, err := h.client.GetStats(context.Background(), &flashindexv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetWorkers() != 1 || st.GetBlocks() != 3 || st.GetEntries() != 3 || st.GetResyncs() != 1 || st.GetGaps() != 0 {
		t.Fatalf("stats %v", st)
	}
}

func TestGapReplaysFromTheShimBuffer(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "subscribed", func() bool { return len(shim.Calls().Subscribes) >= 1 })

	shim.Publish(stored(0, 1))
	// Hidden only once the stream is live: the fake's first pass replays its
	// buffer, hidden batches included, and there would be no gap.
	servicetest.Eventually(t, "first batch", depthIs(t, h, "w0", 1, 1, 2, 3))
	shim.PublishHidden(stored(1, 2)) // lost on the live stream
	shim.Publish(stored(2, 3))
	servicetest.Eventually(t, "gap replayed", depthIs(t, h, "w0", 3, 1, 2, 3))

	st, _ := h.client.GetStats(context.Background(), &flashindexv1.GetStatsRequest{})
	if st.GetGaps() != 1 || st.GetResyncs() != 1 {
		t.Fatalf("want 1 gap and only the start snapshot, got %v", st)
	}
	if snaps := shim.Calls().Snapshots; snaps != 1 {
		t.Fatalf("a replayable gap reloaded the snapshot (%d snapshots)", snaps)
	}
}

func TestGapBeyondTheBufferReloadsTheSnapshot(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "subscribed", func() bool { return len(shim.Calls().Subscribes) >= 1 })

	shim.Publish(stored(0, 1))
	servicetest.Eventually(t, "first batch", depthIs(t, h, "w0", 1, 1, 2, 3))
	shim.PublishHidden(stored(1, 2))
	shim.Forget(3) // batch 2 is gone from the buffer
	shim.Publish(stored(2, 3))
	servicetest.Eventually(t, "snapshot after out-of-range", depthIs(t, h, "w0", 3, 1, 2, 3))
	if snaps := shim.Calls().Snapshots; snaps != 2 {
		t.Fatalf("snapshots = %d, want 2", snaps)
	}
}

func TestNewEpochClearsAndReloads(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2, 3))
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "first epoch", depthIs(t, h, "w0", 3, 1, 2, 3))

	shim.Restart() // the old cache is gone
	shim.Publish(stored(0, 1))
	shim.Publish(stored(1, 7))
	servicetest.Eventually(t, "second epoch replaces the first", depthIs(t, h, "w0", 1, 1, 2, 3))
	servicetest.Eventually(t, "second epoch's events", depthIs(t, h, "w0", 2, 1, 7))
	shim.Publish(stored(7, 8))
	servicetest.Eventually(t, "events continue after the reload", depthIs(t, h, "w0", 3, 1, 7, 8))
	if snaps := shim.Calls().Snapshots; snaps < 2 {
		t.Fatalf("snapshots = %d, want a reload", snaps)
	}
}

// An idle shim that restarted sends no batch to reveal its new epoch; the
// scheduler's re-registration does.
func TestSchedulerAnnouncedEpochReloads(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2, 3))
	sched := servicetest.NewFakeScheduler(w)
	h := start(t, sched)
	servicetest.Eventually(t, "first epoch", depthIs(t, h, "w0", 3, 1, 2, 3))
	servicetest.Eventually(t, "subscribed", func() bool { return len(shim.Calls().Subscribes) >= 1 })

	shim.Restart()
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, &workerv1.Worker{WorkerId: "w0", Address: w.GetAddress(), Epoch: 2})
	servicetest.Eventually(t, "old epoch's blocks dropped", depthIs(t, h, "w0", 0, 1, 2, 3))
}

func TestDuplicateBatchesAreSkipped(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Duplicate(true)
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "subscribed", func() bool { return len(shim.Calls().Subscribes) >= 1 })
	shim.Publish(stored(0, 1, 2))
	shim.Publish(removed(2))
	shim.Publish(stored(1, 2))
	servicetest.Eventually(t, "applied once each, in order", depthIs(t, h, "w0", 2, 1, 2))
	st, _ := h.client.GetStats(context.Background(), &flashindexv1.GetStatsRequest{})
	if st.GetGaps() != 0 {
		t.Fatalf("duplicates counted as gaps: %v", st)
	}
}

func TestRemovedWorkerIsDropped(t *testing.T) {
	s0, w0 := shimWorker(t, "w0")
	s1, w1 := shimWorker(t, "w1")
	s0.Publish(stored(0, 1, 2))
	s1.Publish(stored(0, 1))
	sched := servicetest.NewFakeScheduler(w0, w1)
	h := start(t, sched)
	servicetest.Eventually(t, "both loaded", func() bool {
		return h.depth(t, "w0", 1, 2) == 2 && h.depth(t, "w1", 1, 2) == 1
	})
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, w0)
	servicetest.Eventually(t, "w0 dropped", depthIs(t, h, "w0", 0, 1, 2))
	if h.depth(t, "w1", 1, 2) != 1 {
		t.Fatal("w1 lost its blocks")
	}
	_, err := h.client.DumpWorker(context.Background(), &flashindexv1.DumpWorkerRequest{WorkerId: "w0"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("dump of a removed worker: %v", err)
	}
	d, err := h.client.DumpWorker(context.Background(), &flashindexv1.DumpWorkerRequest{WorkerId: "w1"})
	if err != nil || len(d.GetEvents()) != 1 || d.GetEvents()[0].GetStored().GetBlockHashes()[0] != 1 {
		t.Fatalf("dump w1: %v %v", d, err)
	}
}

func TestFindMatchesByTokensAndErrors(t *testing.T) {
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	hs := kvhash.New(16, "", "").Blocks(tokens)
	shim, w := shimWorker(t, "w0")
	var raw []uint64
	for _, b := range hs {
		raw = append(raw, uint64(b))
	}
	shim.Publish(stored(0, raw[:3]...))
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 3, raw...))

	resp, err := h.client.FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{
		Query:              &flashindexv1.FindMatchesRequest_Tokens{Tokens: &flashindexv1.Tokens{TokenIds: tokens}},
		IncludeFrequencies: true,
	})
	if err != nil || resp.GetQueryBlocks() != 4 || len(resp.GetOverlaps()) != 1 || resp.GetOverlaps()[0].GetDeviceBlocks() != 3 {
		t.Fatalf("by tokens: %v %v", resp, err)
	}
	if f := resp.GetFrequencies(); len(f) != 3 || f[0] != 1 || f[2] != 1 {
		t.Fatalf("frequencies %v", f)
	}
	// Frequencies only when asked for.
	resp, _ = h.client.FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{
		Query: &flashindexv1.FindMatchesRequest_Tokens{Tokens: &flashindexv1.Tokens{TokenIds: tokens}},
	})
	if len(resp.GetOverlaps()) != 1 || len(resp.GetFrequencies()) != 0 {
		t.Fatalf("frequencies not asked for: %v", resp)
	}
	// A salted prompt shares nothing with the unsalted one.
	resp, _ = h.client.FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{
		Query: &flashindexv1.FindMatchesRequest_Tokens{Tokens: &flashindexv1.Tokens{TokenIds: tokens, CacheSalt: "tenant"}},
	})
	if len(resp.GetOverlaps()) != 0 {
		t.Fatalf("salted prompt matched: %v", resp)
	}
	// worker_ids filters.
	resp, _ = h.client.FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{
		Query:              &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: raw}},
		WorkerIds:          []string{"other"},
		IncludeFrequencies: true,
	})
	if len(resp.GetOverlaps()) != 0 || len(resp.GetFrequencies()) != 0 {
		t.Fatalf("filtered: %v", resp)
	}

	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"no query", func() error {
			_, err := h.client.FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{})
			return err
		}(), codes.InvalidArgument},
		{"huge block size", func() error {
			_, err := h.client.FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{
				Query: &flashindexv1.FindMatchesRequest_Tokens{Tokens: &flashindexv1.Tokens{TokenIds: tokens, BlockSize: 1 << 20}}})
			return err
		}(), codes.InvalidArgument},
		{"dump without id", func() error {
			_, err := h.client.DumpWorker(context.Background(), &flashindexv1.DumpWorkerRequest{})
			return err
		}(), codes.InvalidArgument},
	} {
		if status.Code(tc.err) != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

func TestRESTGatewayAndMetrics(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 11, 12))
	h := start(t, servicetest.NewFakeScheduler(w))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 2, 11, 12))

	var got struct {
		QueryBlocks int `json:"queryBlocks"`
		Overlaps    []struct {
			WorkerID     string `json:"workerId"`
			DeviceBlocks int    `json:"deviceBlocks"`
		} `json:"overlaps"`
	}
	body := servicetest.PostJSON(t, "http://"+h.http+"/v1/matches", `{"hashes":{"blockHashes":["11","12"]}}`, &got)
	if got.QueryBlocks != 2 || len(got.Overlaps) != 1 || got.Overlaps[0].WorkerID != "w0" || got.Overlaps[0].DeviceBlocks != 2 {
		t.Fatalf("REST answer %s", body)
	}

	metrics := servicetest.Get(t, "http://"+h.http+"/metrics")
	for _, name := range []string{
		"switchyard_flash_indexer_events_applied_total",
		"switchyard_flash_indexer_gaps_total",
		"switchyard_flash_indexer_resyncs_total",
		"switchyard_flash_indexer_index_blocks",
		"switchyard_flash_indexer_lookup_duration_seconds_bucket",
		"switchyard_flash_indexer_stale_workers",
		"switchyard_flash_indexer_stale_workers_total",
	} {
		if !strings.Contains(metrics, name) {
			t.Errorf("metrics lack %s", name)
		}
	}
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func TestPredictRoute(t *testing.T) {
	shim, w := shimWorker(t, "w0")
	shim.Publish(stored(0, 1, 2))
	_, cold := shimWorker(t, "w1") // holds nothing yet
	h := start(t, servicetest.NewFakeScheduler(w, cold))
	servicetest.Eventually(t, "loaded", depthIs(t, h, "w0", 2, 1, 2, 3, 4))
	h.predictable(t, "w0", "w1")
	ctx := context.Background()

	if _, err := h.client.PredictRoute(ctx, &flashindexv1.PredictRouteRequest{
		WorkerId: "w1", BlockHashes: []uint64{1, 2, 3, 4}, Ttl: durationpb.New(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	query := func(include bool) map[string]*flashindexv1.WorkerOverlap {
		resp, err := h.client.FindMatches(ctx, &flashindexv1.FindMatchesRequest{
			Query:            &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: []uint64{1, 2, 3, 4}}},
			IncludePredicted: include,
		})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*flashindexv1.WorkerOverlap{}
		for _, o := range resp.GetOverlaps() {
			out[o.GetWorkerId()] = o
		}
		return out
	}
	if got := query(false); len(got) != 1 || got["w0"].GetDeviceBlocks() != 2 {
		t.Fatalf("without predictions: %v", got)
	}
	got := query(true)
	if o := got["w1"]; o.GetDeviceBlocks() != 4 || o.GetPredictedDeviceBlocks() != 4 {
		t.Fatalf("predicted worker: %v", o)
	}
	if o := got["w0"]; o.GetDeviceBlocks() != 2 || o.GetPredictedDeviceBlocks() != 0 {
		t.Fatalf("real worker: %v", o)
	}
	st, err := h.client.GetStats(ctx, &flashindexv1.GetStatsRequest{})
	if err != nil || st.GetPredictions() != 1 || st.GetPredictedBlocks() != 4 {
		t.Fatalf("stats %v %v", st, err)
	}

	// The worker's real Stored of the last predicted block replaces it.
	if _, err := h.client.PredictRoute(ctx, &flashindexv1.PredictRouteRequest{WorkerId: "w0", BlockHashes: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if o := query(true)["w0"]; o.GetDeviceBlocks() != 3 || o.GetPredictedDeviceBlocks() != 1 {
		t.Fatalf("w0 predicted: %v", o)
	}
	shim.Publish(stored(2, 3))
	servicetest.Eventually(t, "real Stored replaced the prediction", func() bool {
		st, err := h.client.GetStats(ctx, &flashindexv1.GetStatsRequest{})
		return err == nil && st.GetPredictions() == 1
	})
	if o := query(true)["w0"]; o.GetDeviceBlocks() != 3 || o.GetPredictedDeviceBlocks() != 0 {
		t.Fatalf("w0 after its Stored: %v", o)
	}

	for _, tc := range []struct {
		name string
		req  *flashindexv1.PredictRouteRequest
	}{
		{"no worker", &flashindexv1.PredictRouteRequest{BlockHashes: []uint64{1}}},
		{"no blocks", &flashindexv1.PredictRouteRequest{WorkerId: "w0"}},
		{"zero hash", &flashindexv1.PredictRouteRequest{WorkerId: "w0", BlockHashes: []uint64{1, 0}}},
		{"negative ttl", &flashindexv1.PredictRouteRequest{WorkerId: "w0", BlockHashes: []uint64{1}, Ttl: durationpb.New(-time.Second)}},
		{"zero ttl", &flashindexv1.PredictRouteRequest{WorkerId: "w0", BlockHashes: []uint64{1}, Ttl: &durationpb.Duration{}}},
	} {
		if _, err := h.client.PredictRoute(ctx, tc.req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", tc.name, err)
		}
	}
}
