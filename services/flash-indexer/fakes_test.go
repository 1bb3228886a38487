package flashindexer

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// serve runs a gRPC server on a loopback port until the test ends.
func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
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
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// fakeScheduler serves WatchWorkers: the current set as ADDED, SYNCED, then
// every change.
type fakeScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	mu      sync.Mutex
	workers map[string]*workerv1.Worker
	subs    []chan *schedulerv1.WatchWorkersResponse
}

func newFakeScheduler(ws ...*workerv1.Worker) *fakeScheduler {
	f := &fakeScheduler{workers: map[string]*workerv1.Worker{}}
	for _, w := range ws {
		f.workers[w.GetWorkerId()] = w
	}
	return f
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

// fakeShim is an engine shim's event side: a replay buffer of batches from
// `first` on, live delivery that can lose or duplicate batches, snapshots of
// everything published in the epoch, and restarts (new epoch).
type fakeShim struct {
	enginev1.UnimplementedEngineShimServiceServer
	worker string

	mu         sync.Mutex
	epoch      uint64
	first      uint64 // oldest buffered sequence
	seq        uint64
	log        []*kvv1.KvEventBatch // buffered batches, ascending
	state      []*kvv1.KvEvent      // the epoch's events: what a snapshot replays
	lost       map[uint64]bool      // sequences live subscribers never see
	dupes      bool                 // deliver every live batch twice
	wake       chan struct{}
	subscribes int
	snapshots  int
	// frozen: the shim is unreachable without the connection breaking (a
	// partition that drops packets, a stopped process): nothing is
	// delivered, snapshots and health checks hang until thawed.
	frozen bool
}

func newFakeShim(worker string) *fakeShim {
	return &fakeShim{worker: worker, epoch: 1, first: 1, lost: map[uint64]bool{}, wake: make(chan struct{})}
}

// publish appends one batch; lose keeps it out of live delivery (it stays in
// the buffer, so a replay finds it).
func (f *fakeShim) publish(lose bool, events ...*kvv1.KvEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.state = append(f.state, events...)
	f.log = append(f.log, &kvv1.KvEventBatch{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: events})
	if lose {
		f.lost[f.seq] = true
	}
	close(f.wake)
	f.wake = make(chan struct{})
}

// forget drops buffered batches below seq (a replay can no longer serve them).
func (f *fakeShim) forget(below uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.log) > 0 && f.log[0].GetSequence() < below {
		f.log = f.log[1:]
	}
	f.first = below
}

// restart starts a new epoch with an empty cache; live streams see the new
// epoch's batches (as a reconnect to the restarted shim would).
func (f *fakeShim) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch++
	f.seq, f.first = 0, 1
	f.log, f.state = nil, nil
	f.lost = map[uint64]bool{}
	close(f.wake)
	f.wake = make(chan struct{})
}

// freeze makes the shim unreachable, thaw reachable again; what was published
// meanwhile is delivered after the thaw.
func (f *fakeShim) freeze() { f.setFrozen(true) }
func (f *fakeShim) thaw()   { f.setFrozen(false) }

func (f *fakeShim) setFrozen(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = v
	close(f.wake)
	f.wake = make(chan struct{})
}

// waitThawed blocks while the shim is frozen; false if ctx ended first.
func (f *fakeShim) waitThawed(ctx context.Context) bool {
	for {
		f.mu.Lock()
		frozen, wake := f.frozen, f.wake
		f.mu.Unlock()
		if !frozen {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-wake:
		}
	}
}

// Check is the shim's gRPC health: SERVING, or no answer while frozen.
func (f *fakeShim) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !f.waitThawed(ctx) {
		return nil, ctx.Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (f *fakeShim) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	return nil, status.Error(codes.Unimplemented, "List")
}

func (f *fakeShim) Watch(*healthpb.HealthCheckRequest, grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	return status.Error(codes.Unimplemented, "Watch")
}

func (f *fakeShim) counts() (subscribes, snapshots int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subscribes, f.snapshots
}

func (f *fakeShim) GetKvSnapshot(ctx context.Context, _ *enginev1.GetKvSnapshotRequest) (*enginev1.GetKvSnapshotResponse, error) {
	if !f.waitThawed(ctx) {
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots++
	return &enginev1.GetKvSnapshotResponse{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: append([]*kvv1.KvEvent(nil), f.state...)}, nil
}

func (f *fakeShim) SubscribeKvEvents(req *enginev1.SubscribeKvEventsRequest, st grpc.ServerStreamingServer[enginev1.SubscribeKvEventsResponse]) error {
	next := req.GetFromSequence()
	f.mu.Lock()
	f.subscribes++
	if next < f.first || next > f.seq+1 {
		f.mu.Unlock()
		return status.Error(codes.OutOfRange, "not buffered")
	}
	epoch := f.epoch
	f.mu.Unlock()
	replaying := true // the first pass is a replay: lost batches are in it
	for {
		if !f.waitThawed(st.Context()) {
			return nil
		}
		f.mu.Lock()
		if f.epoch != epoch { // restarted: continue with the new epoch from its start
			epoch, next = f.epoch, 1
		}
		var pending []*kvv1.KvEventBatch
		for _, b := range f.log {
			if b.GetSequence() >= next {
				pending = append(pending, b)
			}
		}
		lost, dupes, wake := f.lost, f.dupes, f.wake
		f.mu.Unlock()
		for _, b := range pending {
			next = b.GetSequence() + 1
			if lost[b.GetSequence()] && !replaying {
				continue
			}
			n := 1
			if dupes {
				n = 2
			}
			for range n {
				if err := st.Send(&enginev1.SubscribeKvEventsResponse{Batch: b}); err != nil {
					return err
				}
			}
		}
		replaying = false
		select {
		case <-st.Context().Done():
			return nil
		case <-wake:
		}
	}
}

func stored(parent uint64, blocks ...uint64) *kvv1.KvEvent {
	return &kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: parent, BlockHashes: blocks}}}
}

func removed(blocks ...uint64) *kvv1.KvEvent {
	return &kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: blocks}}}
}
