package kvfollow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/kv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go's pooled connections wind down on their own.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}

// ---- fakes -------------------------------------------------------------------

// network serves fake peers over bufconn; its dial is the follower's Dial.
type network struct {
	t    *testing.T
	mu   sync.Mutex
	lis  map[string]*bufconn.Listener
	addr int
}

func newNetwork(t *testing.T) *network { return &network{t: t, lis: map[string]*bufconn.Listener{}} }

// serve runs a gRPC server until the test ends and returns its address.
func (n *network) serve(register func(*grpc.Server)) string {
	n.mu.Lock()
	n.addr++
	addr := fmt.Sprintf("peer-%d", n.addr)
	lis := bufconn.Listen(1 << 20)
	n.lis[addr] = lis
	n.mu.Unlock()
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	n.t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return addr
}

func (n *network) dial(addr string) (*grpc.ClientConn, error) {
	n.mu.Lock()
	lis := n.lis[addr]
	n.mu.Unlock()
	if lis == nil {
		return nil, fmt.Errorf("no peer at %s", addr)
	}
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// scheduler serves WatchWorkers: the workers it is given as ADDED, SYNCED,
// then whatever the test sends; closing a watch ends that stream.
type scheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	mu      sync.Mutex
	initial []*workerv1.Worker
	watches []chan *schedulerv1.WatchWorkersResponse
	opened  chan struct{} // one value per WatchWorkers call
}

func newScheduler(ws ...*workerv1.Worker) *scheduler {
	return &scheduler{initial: ws, opened: make(chan struct{}, 16)}
}

func (s *scheduler) WatchWorkers(_ *schedulerv1.WatchWorkersRequest, st grpc.ServerStreamingServer[schedulerv1.WatchWorkersResponse]) error {
	c := make(chan *schedulerv1.WatchWorkersResponse, 64)
	s.mu.Lock()
	for _, w := range s.initial {
		c <- &schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, Worker: w}
	}
	c <- &schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED}
	s.watches = append(s.watches, c)
	s.mu.Unlock()
	s.opened <- struct{}{}
	for {
		select {
		case <-st.Context().Done():
			return nil
		case ev, ok := <-c:
			if !ok {
				return status.Error(codes.Unavailable, "watch closed")
			}
			if err := st.Send(ev); err != nil {
				return err
			}
		}
	}
}

// send delivers ev on the open watches.
func (s *scheduler) send(typ schedulerv1.WorkerEventType, w *workerv1.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.watches {
		c <- &schedulerv1.WatchWorkersResponse{Type: typ, Worker: w}
	}
}

// rewatch ends the open watches; the next one starts from workers.
func (s *scheduler) rewatch(workers ...*workerv1.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initial = workers
	for _, c := range s.watches {
		close(c)
	}
	s.watches = nil
}

// shim is a worker's event side, scripted by the test: a buffer of batches
// from `first` on, snapshots of everything published in the epoch, batches
// hidden from live delivery (replays include them), duplicate delivery,
// restarts, and subscriptions that fail.
type shim struct {
	enginev1.UnimplementedEngineShimServiceServer
	worker string

	mu        sync.Mutex
	epoch     uint64
	first     uint64
	seq       uint64
	log       []*kvv1.KvEventBatch
	state     []*kvv1.KvEvent
	hidden    map[uint64]bool
	dupes     bool
	failNext  int         // SubscribeKvEvents calls still to refuse
	subscribe []time.Time // when each SubscribeKvEvents arrived
	froms     []uint64    // and from which sequence
	snapshots int
	live      int // streams open now
	wake      chan struct{}
}

func newShim(worker string) *shim {
	return &shim{worker: worker, epoch: 1, first: 1, hidden: map[uint64]bool{}, wake: make(chan struct{})}
}

func (f *shim) notify() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// publish appends a batch of Stored events of blocks; hide keeps it out of
// live delivery.
func (f *shim) publish(hide bool, blocks ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	ev := &kvv1.KvEvent{Tier: kvv1.Tier_TIER_DEVICE, Event: &kvv1.KvEvent_Stored{Stored: &kvv1.BlocksStored{BlockHashes: blocks}}}
	f.state = append(f.state, ev)
	f.log = append(f.log, &kvv1.KvEventBatch{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: []*kvv1.KvEvent{ev}})
	if hide {
		f.hidden[f.seq] = true
	}
	f.notify()
}

// forget drops buffered batches below seq.
func (f *shim) forget(below uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.log) > 0 && f.log[0].GetSequence() < below {
		f.log = f.log[1:]
	}
	f.first = below
}

// restart begins a new epoch with an empty cache.
func (f *shim) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch++
	f.seq, f.first = 0, 1
	f.log, f.state, f.hidden = nil, nil, map[uint64]bool{}
	f.notify()
}

func (f *shim) with(fn func(*shim)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// waitLive waits until a subscription stream is open.
func (f *shim) waitLive(t *testing.T) {
	t.Helper()
	eventually(t, "stream open", func() bool { var l int; f.with(func(s *shim) { l = s.live }); return l == 1 })
}

func (f *shim) GetKvSnapshot(context.Context, *enginev1.GetKvSnapshotRequest) (*enginev1.GetKvSnapshotResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots++
	return &enginev1.GetKvSnapshotResponse{WorkerId: f.worker, Epoch: f.epoch, Sequence: f.seq, Events: slices.Clone(f.state)}, nil
}

func (f *shim) SubscribeKvEvents(req *enginev1.SubscribeKvEventsRequest, st grpc.ServerStreamingServer[enginev1.SubscribeKvEventsResponse]) error {
	next := req.GetFromSequence()
	f.mu.Lock()
	f.subscribe = append(f.subscribe, time.Now())
	f.froms = append(f.froms, next)
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
	f.live++
	f.mu.Unlock()
	defer f.with(func(f *shim) { f.live-- })
	replaying := true
	for {
		f.mu.Lock()
		if f.epoch != epoch {
			epoch, next = f.epoch, 1
		}
		var pending []*kvv1.KvEventBatch
		for _, b := range f.log {
			if b.GetSequence() >= next {
				pending = append(pending, b)
			}
		}
		hidden, dupes, wake := f.hidden, f.dupes, f.wake
		f.mu.Unlock()
		for _, b := range pending {
			next = b.GetSequence() + 1
			if hidden[b.GetSequence()] && !replaying {
				continue
			}
			for range 1 + btoi(dupes) {
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// call is one Sink call: "resync", "apply" or "remove", with the blocks of
// the events given.
type call struct {
	op     string
	worker string
	blocks []kv.BlockHash
}

func (c call) String() string { return fmt.Sprintf("%s(%s %v)", c.op, c.worker, c.blocks) }

// recorder is the Sink: it records every call and every hook.
type recorder struct {
	mu      sync.Mutex
	calls   []call
	resyncs []string // "worker:reason"
	gaps    int
	dupes   int
}

func blocksOf(events []kv.Event) []kv.BlockHash {
	var out []kv.BlockHash
	for _, ev := range events {
		out = append(out, ev.Blocks...)
	}
	return out
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

func (r *recorder) Resync(w string, evs []kv.Event) { r.add(call{"resync", w, blocksOf(evs)}) }
func (r *recorder) Apply(w string, evs []kv.Event)  { r.add(call{"apply", w, blocksOf(evs)}) }
func (r *recorder) Remove(w string)                 { r.add(call{"remove", w, nil}) }

func (r *recorder) snapshot() ([]call, []string, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), slices.Clone(r.resyncs), r.gaps, r.dupes
}

// eventually polls f until it returns true; the deadline only guards
// against a hang, it measures nothing.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type harness struct {
	net   *network
	sched *scheduler
	rec   *recorder
	f     *Follower
}

const backoffMin = 20 * time.Millisecond

// start runs a follower against sched until the test ends.
func start(t *testing.T, n *network, sched *scheduler) *harness {
	t.Helper()
	h := &harness{net: n, sched: sched, rec: &recorder{}}
	cfg := Config{
		BackoffMin: backoffMin, BackoffMax: 200 * time.Millisecond,
		Dial:   n.dial,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnResync: func(w, reason string) {
			h.rec.mu.Lock()
			h.rec.resyncs = append(h.rec.resyncs, w+":"+reason)
			h.rec.mu.Unlock()
		},
		OnGap: func(string) {
			h.rec.mu.Lock()
			h.rec.gaps++
			h.rec.mu.Unlock()
		},
		OnDuplicate: func(string) {
			h.rec.mu.Lock()
			h.rec.dupes++
			h.rec.mu.Unlock()
		},
	}
	h.f = New(cfg, h.rec)
	schedAddr := n.serve(func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })
	conn, err := n.dial(schedAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.f.Run(ctx, conn)
	}()
	t.Cleanup(func() {
		cancel()
		<-done // Run returns only after every subscription stopped
		conn.Close()
	})
	return h
}

func (n *network) shim(id string) (*shim, *workerv1.Worker) {
	s := newShim(id)
	addr := n.serve(func(g *grpc.Server) { enginev1.RegisterEngineShimServiceServer(g, s) })
	return s, &workerv1.Worker{WorkerId: id, Address: addr, Epoch: 1}
}

// callsAre waits until the sink has seen exactly want (as strings).
func (h *harness) callsAre(t *testing.T, want ...string) {
	t.Helper()
	var got []call
	ok := func() bool {
		got, _, _, _ = h.rec.snapshot()
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i].String() != want[i] {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("sink calls %v, want %v", got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// resyncsAre waits until OnResync has been told exactly want
// ("worker:reason"); it is called just after the Sink's Resync.
func (h *harness) resyncsAre(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for _, got, _, _ = h.rec.snapshot(); !slices.Equal(got, want); _, got, _, _ = h.rec.snapshot() {
		if time.Now().After(deadline) {
			t.Fatalf("resyncs %v, want %v", got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ---- tests ---------------------------------------------------------------------

func TestSnapshotThenLive(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	sh.publish(false, 1, 2)
	h := start(t, n, newScheduler(w))

	h.callsAre(t, "resync(w0 [1 2])")
	sh.publish(false, 3)
	sh.publish(false, 4)
	h.callsAre(t, "resync(w0 [1 2])", "apply(w0 [3])", "apply(w0 [4])")
	_, resyncs, gaps, _ := h.rec.snapshot()
	if !slices.Equal(resyncs, []string{"w0:start"}) || gaps != 0 {
		t.Fatalf("resyncs %v, gaps %d", resyncs, gaps)
	}
	if h.f.Followed() != 1 {
		t.Fatalf("followed %d", h.f.Followed())
	}
	sh.with(func(s *shim) {
		if !slices.Equal(s.froms, []uint64{2}) {
			t.Errorf("subscribed from %v, want [2] (after the snapshot's sequence 1)", s.froms)
		}
	})
}

func TestDuplicatesAreSkipped(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	sh.with(func(s *shim) { s.dupes = true })
	h := start(t, n, newScheduler(w))
	h.callsAre(t, "resync(w0 [])")
	sh.publish(false, 1)
	sh.publish(false, 2)
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "apply(w0 [2])")
	eventually(t, "duplicates counted", func() bool { _, _, _, d := h.rec.snapshot(); return d == 2 })
}

func TestGapReplaysFromTheBuffer(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	h := start(t, n, newScheduler(w))
	h.callsAre(t, "resync(w0 [])")

	sh.publish(false, 1)
	// Once 1 is applied the stream is live (past its replay), so hiding 2
	// from live delivery makes a gap.
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])")
	sh.publish(true, 2) // lost on the live stream, still buffered
	sh.publish(false, 3)
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "apply(w0 [2])", "apply(w0 [3])")
	_, resyncs, gaps, _ := h.rec.snapshot()
	if gaps != 1 || !slices.Equal(resyncs, []string{"w0:start"}) {
		t.Fatalf("gaps %d, resyncs %v: want one gap healed by replay alone", gaps, resyncs)
	}
	sh.with(func(s *shim) {
		if !slices.Equal(s.froms, []uint64{1, 2}) || s.snapshots != 1 {
			t.Errorf("subscribed from %v with %d snapshots, want [1 2] and 1", s.froms, s.snapshots)
		}
	})
}

func TestGapBeyondTheBufferReloads(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	h := start(t, n, newScheduler(w))
	h.callsAre(t, "resync(w0 [])")

	sh.publish(false, 1)
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])")
	sh.publish(true, 2)
	sh.forget(3) // the replay cannot serve 2 any more
	sh.publish(false, 3)
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "resync(w0 [1 2 3])")
	h.resyncsAre(t, "w0:start", "w0:out_of_range")
}

func TestReplaysWithoutProgressFallBackToTheSnapshot(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	h := start(t, n, newScheduler(w))
	h.callsAre(t, "resync(w0 [])")

	// The shim skips sequence 1 even in replays: hidden and gone from the
	// log, yet it claims to buffer from 1.
	sh.publish(true, 1)
	sh.with(func(s *shim) { s.log = s.log[1:] })
	sh.publish(false, 2)
	h.callsAre(t, "resync(w0 [])", "resync(w0 [1 2])")
	h.resyncsAre(t, "w0:start", "w0:gap")
	if _, _, gaps, _ := h.rec.snapshot(); gaps != DefaultConfig().MaxReplays+1 {
		t.Fatalf("gaps %d, want %d", gaps, DefaultConfig().MaxReplays+1)
	}
}

func TestNewEpochOnTheStreamReloads(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	sh.publish(false, 1)
	h := start(t, n, newScheduler(w))
	h.callsAre(t, "resync(w0 [1])")
	// A stream opened after the restart would start in the new epoch; this
	// test is about one that sees the epoch change.
	sh.waitLive(t)

	sh.restart()
	sh.publish(false, 7)
	h.callsAre(t, "resync(w0 [1])", "resync(w0 [7])")
	h.resyncsAre(t, "w0:start", "w0:epoch")
	sh.publish(false, 8)
	h.callsAre(t, "resync(w0 [1])", "resync(w0 [7])", "apply(w0 [8])")
}

func TestSchedulerAnnouncedEpochFollowsAfresh(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	sh.publish(false, 1)
	sched := newScheduler(w)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [1])")
	sh.waitLive(t) // else a subscription after the restart finds it out itself

	// The shim restarted and is idle: only the scheduler knows.
	sh.restart()
	sched.send(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, &workerv1.Worker{WorkerId: "w0", Address: w.GetAddress(), Epoch: 2})
	h.callsAre(t, "resync(w0 [1])", "resync(w0 [])")
	// The same epoch again changes nothing.
	sched.send(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, &workerv1.Worker{WorkerId: "w0", Address: w.GetAddress(), Epoch: 2})
	sh.publish(false, 5)
	h.callsAre(t, "resync(w0 [1])", "resync(w0 [])", "apply(w0 [5])")
}

func TestRemovedWorkerIsDropped(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	sched := newScheduler(w)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [])")
	sh.waitLive(t)

	sched.send(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, &workerv1.Worker{WorkerId: "w0"})
	h.callsAre(t, "resync(w0 [])", "remove(w0 [])")
	eventually(t, "stream closed", func() bool { var l int; sh.with(func(s *shim) { l = s.live }); return l == 0 })
	if h.f.Followed() != 0 {
		t.Fatalf("followed %d", h.f.Followed())
	}
	sh.publish(false, 1) // nobody listens any more
	time.Sleep(20 * time.Millisecond)
	h.callsAre(t, "resync(w0 [])", "remove(w0 [])")
}

func TestWorkerGoneWhileNotWatchingIsDropped(t *testing.T) {
	n := newNetwork(t)
	_, w0 := n.shim("w0")
	_, w1 := n.shim("w1")
	sched := newScheduler(w0)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [])")
	<-sched.opened

	// The watch breaks; when it comes back w0 is gone and w1 is new.
	sched.rewatch(w1)
	<-sched.opened
	eventually(t, "w0 dropped, w1 followed", func() bool {
		calls, _, _, _ := h.rec.snapshot()
		var s []string
		for _, c := range calls {
			s = append(s, c.String())
		}
		return slices.Contains(s, "remove(w0 [])") && slices.Contains(s, "resync(w1 [])") && h.f.Followed() == 1
	})
}

func TestMovedWorkerIsDroppedAndFollowedAtItsNewAddress(t *testing.T) {
	n := newNetwork(t)
	_, w := n.shim("w0")
	moved, w2 := n.shim("w0")
	moved.publish(false, 9)
	sched := newScheduler(w)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [])")
	sched.send(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, w2)
	h.callsAre(t, "resync(w0 [])", "remove(w0 [])", "resync(w0 [9])")
}

func TestReconnectsWithBackoff(t *testing.T) {
	n := newNetwork(t)
	sh, w := n.shim("w0")
	sh.with(func(s *shim) { s.failNext = 3 })
	h := start(t, n, newScheduler(w))

	eventually(t, "fourth subscription", func() bool { var k int; sh.with(func(s *shim) { k = len(s.subscribe) }); return k >= 4 })
	sh.publish(false, 1)
	h.callsAre(t, "resync(w0 [])", "resync(w0 [])", "resync(w0 [])", "resync(w0 [])", "apply(w0 [1])")
	h.resyncsAre(t, "w0:start", "w0:reconnect", "w0:reconnect", "w0:reconnect")
	// Each retry waits at least the backoff, doubling (less 25% jitter);
	// only lower bounds: a loaded machine can only stretch the gaps.
	sh.with(func(s *shim) {
		for i := 1; i < 4; i++ {
			min := time.Duration(float64(backoffMin<<(i-1)) * 0.75)
			if gap := s.subscribe[i].Sub(s.subscribe[i-1]); gap < min {
				t.Errorf("retry %d after %v, want ≥ %v", i, gap, min)
			}
		}
	})
}

func TestUnreachableSchedulerIsRetriedUntilStopped(t *testing.T) {
	n := newNetwork(t)
	rec := &recorder{}
	f := New(Config{BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, Dial: n.dial,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, rec)
	conn, err := grpc.NewClient("passthrough:///nowhere",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return nil, fmt.Errorf("refused") }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	f.Run(ctx, conn) // returns once ctx ends
	if calls, _, _, _ := rec.snapshot(); len(calls) != 0 || f.Followed() != 0 {
		t.Fatalf("calls %v, followed %d", calls, f.Followed())
	}
}
