package sessionindexer

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// serve runs a gRPC server on a loopback port (addr "" = any) until the
// test ends.
func serve(t *testing.T, addr string, register func(*grpc.Server)) (string, func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			g.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// fakeScheduler implements WatchWorkers (snapshot, SYNCED, then changes), a
// fixed program table and a route decision stream the test feeds.
type fakeScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	mu        sync.Mutex
	workers   map[string]*workerv1.Worker
	subs      []chan *schedulerv1.WatchWorkersResponse
	routeSubs []chan *schedulerv1.RouteDecision
	stopped   chan struct{}
}

func newFakeScheduler() *fakeScheduler {
	return &fakeScheduler{workers: map[string]*workerv1.Worker{}, stopped: make(chan struct{})}
}

func (f *fakeScheduler) set(typ schedulerv1.WorkerEventType, w *workerv1.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if typ == schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED {
		delete(f.workers, w.GetWorkerId())
	} else {
		f.workers[w.GetWorkerId()] = w
	}
	for _, c := range f.subs {
		c <- &schedulerv1.WatchWorkersResponse{Type: typ, Worker: w}
	}
}

func (f *fakeScheduler) WatchWorkers(_ *schedulerv1.WatchWorkersRequest, st grpc.ServerStreamingServer[schedulerv1.WatchWorkersResponse]) error {
	c := make(chan *schedulerv1.WatchWorkersResponse, 64)
	f.mu.Lock()
	for _, w := range f.workers {
		c <- &schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, Worker: w}
	}
	c <- &schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED}
	f.subs = append(f.subs, c)
	f.mu.Unlock()
	for {
		select {
		case <-st.Context().Done():
			return nil
		case ev := <-c:
			if err := st.Send(ev); err != nil {
				return err
			}
		}
	}
}

// WatchPrograms sends a one-program table (child, a sub-agent of a), then
// SYNCED, then nothing.
func (f *fakeScheduler) WatchPrograms(_ *schedulerv1.WatchProgramsRequest, st grpc.ServerStreamingServer[schedulerv1.WatchProgramsResponse]) error {
	for _, ev := range []*schedulerv1.WatchProgramsResponse{
		{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING, Program: &schedulerv1.Program{SessionId: "child", ParentSessionId: "a"}},
		{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED},
	} {
		if err := st.Send(ev); err != nil {
			return err
		}
	}
	<-st.Context().Done()
	return nil
}

// WatchRouteDecisions streams what route sends.
func (f *fakeScheduler) WatchRouteDecisions(_ *schedulerv1.WatchRouteDecisionsRequest, st grpc.ServerStreamingServer[schedulerv1.WatchRouteDecisionsResponse]) error {
	c := make(chan *schedulerv1.RouteDecision, 16)
	f.mu.Lock()
	f.routeSubs = append(f.routeSubs, c)
	f.mu.Unlock()
	for {
		select {
		case <-st.Context().Done():
			return nil
		case d := <-c:
			if err := st.Send(&schedulerv1.WatchRouteDecisionsResponse{Decision: d}); err != nil {
				return err
			}
		}
	}
}

func (f *fakeScheduler) route(d *schedulerv1.RouteDecision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.routeSubs {
		c <- d
	}
}

func (f *fakeScheduler) watchingRoutes() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.routeSubs) > 0
}

// fakeShim keeps every batch it published (a replay buffer from `first`)
// and serves snapshots as the Stored events of everything published.
type fakeShim struct {
	enginev1.UnimplementedEngineShimServiceServer
	worker string
	mu     sync.Mutex
	epoch  uint64
	first  uint64 // oldest buffered sequence
	seq    uint64
	log    []*kvv1.KvEventBatch
	state  []*kvv1.KvEvent // what a snapshot returns
	wake   chan struct{}
}

func newFakeShim(worker string) *fakeShim {
	return &fakeShim{worker: worker, epoch: 1, first: 1, wake: make(chan struct{})}
}

// publish appends one batch; skip leaves a sequence out (a lost batch).
func (f *fakeShim) publish(skip bool, events ...*kvv1.KvEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.state = append(f.state, events...)
	if skip {
		return
	}
	f.log = append(f.log, &kvv1.KvEventBatch{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: events})
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeShim) GetKvSnapshot(context.Context, *enginev1.GetKvSnapshotRequest) (*enginev1.GetKvSnapshotResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var stored []*kvv1.KvEvent
	for _, e := range f.state {
		if e.GetStored() != nil {
			stored = append(stored, e)
		}
	}
	return &enginev1.GetKvSnapshotResponse{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: stored}, nil
}

func (f *fakeShim) SubscribeKvEvents(req *enginev1.SubscribeKvEventsRequest, st grpc.ServerStreamingServer[enginev1.SubscribeKvEventsResponse]) error {
	next := req.GetFromSequence()
	f.mu.Lock()
	if next != 0 && next < f.first {
		f.mu.Unlock()
		return status.Error(codes.OutOfRange, "not buffered")
	}
	f.mu.Unlock()
	sent := 0
	for {
		f.mu.Lock()
		pending := f.log[sent:]
		wake := f.wake
		f.mu.Unlock()
		for _, b := range pending {
			sent++
			if b.GetSequence() < next {
				continue
			}
			if err := st.Send(&enginev1.SubscribeKvEventsResponse{Batch: b}); err != nil {
				return err
			}
		}
		select {
		case <-st.Context().Done():
			return nil
		case <-wake:
		}
	}
}

func stored(session string, parent uint64, blocks ...uint64) *kvv1.KvEvent {
	return &kvv1.KvEvent{SessionId: session, Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: parent, BlockHashes: blocks}}}
}
