package servicetest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/servicekit"
)

func TestMain(m *testing.M) { VerifyNoLeaks(m) }

// failures is a testing.TB that records Fatalf instead of stopping.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Helper() {}
func (f *failures) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func TestWaitsGiveUpAtTheirDeadline(t *testing.T) {
	if !Poll(time.Second, func() bool { return true }) || Poll(10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll: want true for a condition that holds, false for one that never does")
	}
	f := &failures{TB: t}
	EventuallyWithin(f, 10*time.Millisecond, "the moon", func() bool { return false })
	if len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "the moon") {
		t.Errorf("EventuallyWithin failed with %q, want one message naming what it waited for", f.msgs)
	}
	ch := make(chan struct{})
	close(ch)
	Within(t, ch, "a closed channel") // returns at once
}

// reader returns a function that reads st's next message, as show says it.
func reader[M any](t *testing.T, st interface{ Recv() (*M, error) }, show func(*M) string) func() string {
	return func() string {
		t.Helper()
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return show(m)
	}
}

func TestFakeSchedulerWatch(t *testing.T) {
	w0, w1 := &workerv1.Worker{WorkerId: "w0"}, &workerv1.Worker{WorkerId: "w1"}
	sched := NewFakeScheduler(w0)
	conn := ServeBufconn(t, sched.Register)
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	st, err := schedulerv1.NewSchedulerServiceClient(conn).WatchWorkers(ctx, &schedulerv1.WatchWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := reader(t, st, func(ev *schedulerv1.WatchWorkersResponse) string {
		return strings.TrimPrefix(ev.GetType().String(), "WORKER_EVENT_TYPE_") + " " + ev.GetWorker().GetWorkerId()
	})
	if got := []string{next(), next()}; !slices.Equal(got, []string{"ADDED w0", "SYNCED "}) {
		t.Fatalf("watch opened with %q", got)
	}
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, w1)
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, w0)
	if got := []string{next(), next()}; !slices.Equal(got, []string{"ADDED w1", "REMOVED w0"}) {
		t.Fatalf("changes %q", got)
	}
	sched.Rewatch()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable || sched.Watches() != 1 {
		t.Fatalf("after Rewatch: %v with %d watches, want UNAVAILABLE after 1", err, sched.Watches())
	}
}

func TestFakeSchedulerProgramsAndRoutes(t *testing.T) {
	sched := NewFakeScheduler()
	sched.RewatchPrograms(&schedulerv1.Program{SessionId: "a"})
	client := schedulerv1.NewSchedulerServiceClient(ServeBufconn(t, sched.Register))
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	programs, err := client.WatchPrograms(ctx, &schedulerv1.WatchProgramsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := reader(t, programs, func(ev *schedulerv1.WatchProgramsResponse) string {
		return strings.TrimPrefix(ev.GetType().String(), "PROGRAM_EVENT_TYPE_") + " " + ev.GetProgram().GetSessionId()
	})
	if got := []string{next(), next()}; !slices.Equal(got, []string{"EXISTING a", "SYNCED "}) {
		t.Fatalf("program watch opened with %q", got)
	}
	sched.SetProgram(&schedulerv1.Program{SessionId: "b"})
	if got := next(); got != "CHANGED b" {
		t.Fatalf("change %q", got)
	}
	sched.RewatchPrograms()
	if _, err := programs.Recv(); status.Code(err) != codes.Unavailable || sched.ProgramWatches() != 1 {
		t.Fatalf("after RewatchPrograms: %v with %d watches, want UNAVAILABLE after 1", err, sched.ProgramWatches())
	}

	routes, err := client.WatchRouteDecisions(ctx, &schedulerv1.WatchRouteDecisionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the route watch", func() bool { return sched.RouteWatches() == 1 })
	sched.Decide(&schedulerv1.RouteDecision{SessionId: "s", WorkerId: "w0"})
	if d, err := routes.Recv(); err != nil || d.GetDecision().GetSessionId() != "s" {
		t.Fatalf("decision %v, %v", d, err)
	}
}

// A watch its client gave up is forgotten: changes after it never wait for
// a stream nobody reads.
func TestFakeSchedulerForgetsEndedWatches(t *testing.T) {
	sched := NewFakeScheduler()
	client := schedulerv1.NewSchedulerServiceClient(ServeBufconn(t, sched.Register))
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := client.WatchRouteDecisions(ctx, &schedulerv1.WatchRouteDecisionsRequest{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the route watch", func() bool { return sched.RouteWatches() == 1 })
	cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 { // past the stream's buffer
			sched.Decide(&schedulerv1.RouteDecision{SessionId: fmt.Sprint(i)})
		}
	}()
	Within(t, done, "decisions after the watch ended were not all taken")
}

// A replay delivers hidden batches and not lost ones; live delivery neither;
// a snapshot has every event.
func TestFakeShimDelivery(t *testing.T) {
	shim := NewFakeShim("w0")
	client := enginev1.NewEngineShimServiceClient(ServeBufconn(t, shim.Register))
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	shim.Publish(Stored(0, 1))
	shim.PublishHidden(Stored(1, 2))
	shim.PublishLost(Stored(2, 3))
	shim.Publish(Stored(3, 4))
	st, err := client.SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	recv := func(n int) {
		t.Helper()
		for range n {
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, resp.GetBatch().GetSequence())
		}
	}
	recv(3)
	Eventually(t, "the stream open", func() bool { return shim.Calls().Live == 1 })
	shim.PublishHidden(Stored(4, 5))
	shim.Publish(Stored(5, 6))
	recv(1)
	if !slices.Equal(seqs, []uint64{1, 2, 4, 6}) {
		t.Errorf("delivered %v, want [1 2 4 6]: the replay has 2 (hidden) but not 3 (lost), live delivery neither 5 nor 3", seqs)
	}
	snap, err := client.GetKvSnapshot(ctx, &enginev1.GetKvSnapshotRequest{})
	if err != nil || snap.GetSequence() != 6 || len(snap.GetEvents()) != 6 {
		t.Errorf("snapshot at %d with %d events (%v), want 6 and 6", snap.GetSequence(), len(snap.GetEvents()), err)
	}
	shim.Forget(3)
	old, err := client.SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: 2})
	if err == nil {
		_, err = old.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("a subscription from a forgotten sequence: %v, want OUT_OF_RANGE", err)
	}
}

type idle struct{}

func (idle) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func TestStartServesUntilStopped(t *testing.T) {
	run, _ := Start(t, servicekit.Options{Name: "idle"}, func(*servicekit.Server) (idle, error) { return idle{}, nil })
	Eventually(t, "SERVING", func() bool {
		resp, err := healthpb.NewHealthClient(run.Conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}
	Within(t, run.Done(), "the service to stop")
}

// A peer served again where it was waits for its port while something else
// holds it a moment, instead of failing the test.
func TestServeAtWaitsForItsPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := held.Addr().String()
	go func() {
		time.Sleep(100 * time.Millisecond)
		held.Close()
	}()
	if got, _ := ServeAt(t, addr, func(*grpc.Server) {}); got != addr {
		t.Errorf("served at %s, want %s", got, addr)
	}
}
