package servicetest

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// ---- scheduler ------------------------------------------------------------------

// FakeScheduler is the scheduler's watches as the services that follow it see
// them. WatchWorkers sends the current workers as ADDED, then SYNCED, then every
// Set; WatchPrograms sends the program table as EXISTING, then SYNCED, then every
// SetProgram as CHANGED; WatchRouteDecisions sends every Decide. Rewatch
// and RewatchPrograms end the open worker and program watches, as a scheduler
// restart would. The rest of the scheduler's API is unimplemented; a test that
// needs more embeds it in a type of its own, and registers that type (the
// embedded Register would serve the watches alone).
type FakeScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer

	workers  watched[workerv1.Worker, schedulerv1.WatchWorkersResponse]
	programs watched[schedulerv1.Program, schedulerv1.WatchProgramsResponse]
	routes   watched[struct{}, schedulerv1.WatchRouteDecisionsResponse] // no table
	// programReq is the last WatchPrograms request (under programs.mu).
	programReq *schedulerv1.WatchProgramsRequest
}

// NewFakeScheduler returns a scheduler that knows workers, and no program.
func NewFakeScheduler(workers ...*workerv1.Worker) *FakeScheduler {
	f := &FakeScheduler{}
	f.workers.table = slices.Clone(workers)
	return f
}

// Register serves the fake on g.
func (f *FakeScheduler) Register(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, f) }

// Set applies one worker event to the worker set (REMOVED drops the worker,
// any other type adds or replaces it) and sends it on the open watches.
func (f *FakeScheduler) Set(typ schedulerv1.WorkerEventType, w *workerv1.Worker) {
	f.workers.change(func(ws []*workerv1.Worker) []*workerv1.Worker {
		if typ == schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED {
			return slices.DeleteFunc(ws, func(o *workerv1.Worker) bool { return o.GetWorkerId() == w.GetWorkerId() })
		}
		return put(ws, w, (*workerv1.Worker).GetWorkerId)
	}, &schedulerv1.WatchWorkersResponse{Type: typ, Worker: w})
}

// Rewatch replaces the worker set and ends the open watches (UNAVAILABLE): the
// next watch starts from workers.
func (f *FakeScheduler) Rewatch(workers ...*workerv1.Worker) { f.workers.rewatch(workers) }

// Watches is how many WatchWorkers calls there have been.
func (f *FakeScheduler) Watches() int { return f.workers.opened() }

// SetProgram adds p to the program table, or replaces its session's entry,
// and sends it on the open program watches (with no reason).
func (f *FakeScheduler) SetProgram(p *schedulerv1.Program) { f.ChangeProgram(p, "") }

// ChangeProgram is SetProgram with the change's reason. The fake sends it
// whatever the watch asked for, as a scheduler that predates
// WatchProgramsRequest's filters would.
func (f *FakeScheduler) ChangeProgram(p *schedulerv1.Program, reason string) {
	f.programs.change(func(ps []*schedulerv1.Program) []*schedulerv1.Program {
		return put(ps, p, (*schedulerv1.Program).GetSessionId)
	}, &schedulerv1.WatchProgramsResponse{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_CHANGED, Program: p, Reason: reason})
}

// ProgramWatchRequest is the last WatchPrograms call's request (nil before
// the first).
func (f *FakeScheduler) ProgramWatchRequest() *schedulerv1.WatchProgramsRequest {
	f.programs.mu.Lock()
	defer f.programs.mu.Unlock()
	return f.programReq
}

// RewatchPrograms replaces the program table and ends the open program
// watches (UNAVAILABLE): the next watch starts from table.
func (f *FakeScheduler) RewatchPrograms(table ...*schedulerv1.Program) { f.programs.rewatch(table) }

// ProgramWatches is how many WatchPrograms calls there have been.
func (f *FakeScheduler) ProgramWatches() int { return f.programs.opened() }

// Decide sends a route decision on the open route watches.
func (f *FakeScheduler) Decide(d *schedulerv1.RouteDecision) {
	f.routes.change(nil, &schedulerv1.WatchRouteDecisionsResponse{Decision: d})
}

// RouteWatches is how many WatchRouteDecisions calls there have been.
func (f *FakeScheduler) RouteWatches() int { return f.routes.opened() }

func (f *FakeScheduler) WatchWorkers(_ *schedulerv1.WatchWorkersRequest, st grpc.ServerStreamingServer[schedulerv1.WatchWorkersResponse]) error {
	return f.workers.serve(st, func(w *workerv1.Worker) *schedulerv1.WatchWorkersResponse {
		return &schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, Worker: w}
	}, &schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED})
}

func (f *FakeScheduler) WatchPrograms(req *schedulerv1.WatchProgramsRequest, st grpc.ServerStreamingServer[schedulerv1.WatchProgramsResponse]) error {
	f.programs.mu.Lock()
	f.programReq = req
	f.programs.mu.Unlock()
	return f.programs.serve(st, func(p *schedulerv1.Program) *schedulerv1.WatchProgramsResponse {
		return &schedulerv1.WatchProgramsResponse{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING, Program: p}
	}, &schedulerv1.WatchProgramsResponse{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED})
}

func (f *FakeScheduler) WatchRouteDecisions(_ *schedulerv1.WatchRouteDecisionsRequest, st grpc.ServerStreamingServer[schedulerv1.WatchRouteDecisionsResponse]) error {
	return f.routes.serve(st, nil, nil)
}

// put replaces the entry of table with v's key by v, or appends v.
func put[T any](table []*T, v *T, key func(*T) string) []*T {
	if i := slices.IndexFunc(table, func(o *T) bool { return key(o) == key(v) }); i >= 0 {
		table[i] = v
		return table
	}
	return append(table, v)
}

// watched is one of the scheduler's watches: the table of T a new stream
// starts from, and the open streams of M that every change goes to. One
// lock keeps what a new stream starts with and what is sent after from
// overlapping or missing each other.
type watched[T, M any] struct {
	mu      sync.Mutex
	table   []*T
	streams []*watchStream[M]
	calls   int
}

// watchStream is one open stream: what it is sent, and done, closed when
// its handler stopped reading.
type watchStream[M any] struct {
	c    chan *M
	done chan struct{}
}

// change edits the table (edit nil: none) and sends m on the open streams
// (not to one whose handler has stopped: it would never take it).
func (w *watched[T, M]) change(edit func([]*T) []*T, m *M) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if edit != nil {
		w.table = edit(w.table)
	}
	for _, s := range w.streams {
		select {
		case s.c <- m:
		case <-s.done:
		}
	}
}

// rewatch replaces the table and ends the open streams (UNAVAILABLE).
func (w *watched[T, M]) rewatch(table []*T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.table = slices.Clone(table)
	for _, s := range w.streams {
		close(s.c)
	}
	w.streams = nil
}

// opened is how many streams there have been.
func (w *watched[T, M]) opened() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// serve runs one stream: the table, each entry as entry makes it, then
// synced (when not nil), then every change, until the call ends (nil) or
// rewatch ends it (UNAVAILABLE).
func (w *watched[T, M]) serve(st grpc.ServerStreamingServer[M], entry func(*T) *M, synced *M) error {
	w.mu.Lock()
	ws := &watchStream[M]{c: make(chan *M, len(w.table)+64), done: make(chan struct{})}
	c := ws.c
	for _, v := range w.table {
		c <- entry(v)
	}
	if synced != nil {
		c <- synced
	}
	w.streams = append(w.streams, ws)
	w.calls++
	w.mu.Unlock()
	// A stream that ended says so first, so that a change blocked on its
	// full channel, holding the lock, lets go; then it is taken out.
	defer func() {
		close(ws.done)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.streams = slices.DeleteFunc(w.streams, func(s *watchStream[M]) bool { return s == ws })
	}()
	for {
		select {
		case <-st.Context().Done():
			return nil
		case m, ok := <-c:
			if !ok {
				return status.Error(codes.Unavailable, "watch closed")
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	}
}

// ---- engine shim ----------------------------------------------------------------

// FakeShim is an engine shim's KV event side, scripted by the test: a replay
// buffer of batches from Forget's bound on, live delivery that can lose or
// duplicate batches, snapshots of everything published in the epoch, restarts
// (a new epoch), subscriptions that fail, and freezing (unreachable without the
// connection breaking). Register serves it; RegisterHealth adds grpc.health.v1
// answered by the fake. The rest of the shim's API is unimplemented.
type FakeShim struct {
	enginev1.UnimplementedEngineShimServiceServer
	worker string

	mu       sync.Mutex
	epoch    uint64
	first    uint64 // oldest buffered sequence
	seq      uint64
	log      []*kvv1.KvEventBatch // buffered batches, ascending
	state    []*kvv1.KvEvent      // the epoch's events: what a snapshot returns
	hidden   map[uint64]bool      // sequences live delivery leaves out
	dupes    bool                 // deliver every batch twice
	failNext int                  // SubscribeKvEvents calls still to refuse
	frozen   bool
	calls    ShimCalls
	wake     chan struct{} // closed on every change
}

// ShimCalls is what a FakeShim was asked.
type ShimCalls struct {
	// Subscribes are the SubscribeKvEvents calls, in arrival order.
	Subscribes []Subscribe
	// Snapshots counts the GetKvSnapshot answers.
	Snapshots int
	// Live counts the subscription streams open now.
	Live int
}

// Subscribe is one SubscribeKvEvents call.
type Subscribe struct {
	At   time.Time
	From uint64 // from_sequence
}

// NewFakeShim returns worker's shim in epoch 1 with nothing published.
func NewFakeShim(worker string) *FakeShim {
	return &FakeShim{worker: worker, epoch: 1, first: 1, hidden: map[uint64]bool{}, wake: make(chan struct{})}
}

// Register serves the shim's API on g.
func (f *FakeShim) Register(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, f) }

// RegisterHealth serves grpc.health.v1 on g as the shim's: SERVING, or no
// answer while frozen.
func (f *FakeShim) RegisterHealth(g *grpc.Server) {
	healthpb.RegisterHealthServer(g, &fakeHealth{shim: f})
}

// notify wakes whoever waits on a change; f.mu is held.
func (f *FakeShim) notify() {
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *FakeShim) publish(events []*kvv1.KvEvent, hidden, buffered bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.state = append(f.state, events...)
	if buffered {
		f.log = append(f.log, &kvv1.KvEventBatch{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: events})
	}
	if hidden {
		f.hidden[f.seq] = true
	}
	f.notify()
}

// Publish appends one batch of events.
func (f *FakeShim) Publish(events ...*kvv1.KvEvent) { f.publish(events, false, true) }

// PublishHidden appends one batch that live delivery leaves out: a stream past
// its replay sees a gap, and a replay (a new subscription from before it)
// delivers it.
func (f *FakeShim) PublishHidden(events ...*kvv1.KvEvent) { f.publish(events, true, true) }

// PublishLost uses up a sequence for a batch that neither live delivery nor a
// replay ever sends, though the buffer claims to hold it: only a snapshot has
// its events.
func (f *FakeShim) PublishLost(events ...*kvv1.KvEvent) { f.publish(events, true, false) }

// Forget drops the buffered batches below seq: a replay can no longer serve
// them (OUT_OF_RANGE).
func (f *FakeShim) Forget(below uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.log) > 0 && f.log[0].GetSequence() < below {
		f.log = f.log[1:]
	}
	f.first = below
}

// Restart begins a new epoch with an empty cache; open streams go on with the
// new epoch's batches, as a reconnect to the restarted shim would.
func (f *FakeShim) Restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch++
	f.seq, f.first = 0, 1
	f.log, f.state, f.hidden = nil, nil, map[uint64]bool{}
	f.notify()
}

// Duplicate makes live delivery send every batch twice (on) or once.
func (f *FakeShim) Duplicate(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dupes = on
}

// FailSubscribes makes the next n SubscribeKvEvents calls fail (UNAVAILABLE).
func (f *FakeShim) FailSubscribes(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = n
}

// Freeze makes the shim unreachable without the connection breaking (a
// partition that drops packets, a stopped process): nothing is delivered, and
// snapshots and health checks hang, until Thaw. What was published meanwhile
// is delivered after the thaw.
func (f *FakeShim) Freeze() { f.setFrozen(true) }

// Thaw ends Freeze.
func (f *FakeShim) Thaw() { f.setFrozen(false) }

func (f *FakeShim) setFrozen(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = v
	f.notify()
}

// Calls returns what the shim has been asked so far.
func (f *FakeShim) Calls() ShimCalls {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	c.Subscribes = slices.Clone(c.Subscribes)
	return c
}

// waitThawed blocks while the shim is frozen; false if ctx ended first.
func (f *FakeShim) waitThawed(ctx context.Context) bool {
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

func (f *FakeShim) GetKvSnapshot(ctx context.Context, _ *enginev1.GetKvSnapshotRequest) (*enginev1.GetKvSnapshotResponse, error) {
	if !f.waitThawed(ctx) {
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Snapshots++
	return &enginev1.GetKvSnapshotResponse{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: slices.Clone(f.state)}, nil
}

func (f *FakeShim) SubscribeKvEvents(req *enginev1.SubscribeKvEventsRequest, st grpc.ServerStreamingServer[enginev1.SubscribeKvEventsResponse]) error {
	next := req.GetFromSequence()
	f.mu.Lock()
	f.calls.Subscribes = append(f.calls.Subscribes, Subscribe{At: time.Now(), From: next})
	if f.failNext > 0 {
		f.failNext--
		f.mu.Unlock()
		return status.Error(codes.Unavailable, "shim busy")
	}
	if next < f.first || next > f.seq+1 {
		f.mu.Unlock()
		return status.Error(codes.OutOfRange, "not buffered")
	}
	epoch := f.epoch
	f.calls.Live++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.calls.Live--
		f.mu.Unlock()
	}()
	replaying := true // the first pass is a replay: hidden batches are in it
	for {
		if !f.waitThawed(st.Context()) {
			return nil
		}
		f.mu.Lock()
		if f.epoch != epoch { // restarted: go on with the new epoch from its start
			epoch, next = f.epoch, 1
		}
		var pending []*kvv1.KvEventBatch
		var hidden []bool // read under f.mu: publish writes f.hidden
		for _, b := range f.log {
			if b.GetSequence() >= next {
				pending = append(pending, b)
				hidden = append(hidden, f.hidden[b.GetSequence()])
			}
		}
		dupes, wake := f.dupes, f.wake
		f.mu.Unlock()
		for i, b := range pending {
			next = b.GetSequence() + 1
			if hidden[i] && !replaying {
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

// fakeHealth is a FakeShim's grpc.health.v1.
type fakeHealth struct {
	healthpb.UnimplementedHealthServer
	shim *FakeShim
}

func (h *fakeHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !h.shim.waitThawed(ctx) {
		return nil, ctx.Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Stored is a device-tier BlocksStored event of blocks chained after parent.
func Stored(parent uint64, blocks ...uint64) *kvv1.KvEvent {
	return &kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{ParentHash: parent, BlockHashes: blocks}}}
}

// Removed is a device-tier BlocksRemoved event of blocks.
func Removed(blocks ...uint64) *kvv1.KvEvent {
	return &kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Removed{Removed: &kvv1.BlocksRemoved{BlockHashes: blocks}}}
}
