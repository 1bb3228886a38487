package kvfollow

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestMain(m *testing.M) { servicetest.VerifyNoLeaks(m) }

// ---- fakes -------------------------------------------------------------------

// waitLive waits until sh has n subscription streams open.
func waitLive(t *testing.T, sh *servicetest.FakeShim, n int) {
	t.Helper()
	servicetest.Eventually(t, fmt.Sprintf("%d streams open", n), func() bool { return sh.Calls().Live == n })
}

// froms are the from_sequence of sh's subscriptions, in order.
func froms(sh *servicetest.FakeShim) []uint64 {
	var out []uint64
	for _, s := range sh.Calls().Subscribes {
		out = append(out, s.From)
	}
	return out
}

// stored is a batch's one event: blocks stored, without a parent.
func stored(blocks ...uint64) *kvv1.KvEvent { return servicetest.Stored(0, blocks...) }

// call is one Sink call: "resync", "apply" or "remove", with the blocks of
// the events given.
type call struct {
	op     string
	worker string
	blocks []kv.BlockHash
}

func (c call) String() string { return fmt.Sprintf("%s(%s %v)", c.op, c.worker, c.blocks) }

// recorder is the Sink: it records every call and every hook. A batch
// holding the block refuse names it refuses: Resync instead of applying.
type recorder struct {
	mu      sync.Mutex
	calls   []call
	resyncs []string // "worker:reason"
	streams []string // "subscribe worker", "end worker"
	gaps    int
	dupes   int
	batches int

	f      *Follower
	refuse kv.BlockHash
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
func (r *recorder) Apply(w string, evs []kv.Event) {
	var refuse kv.BlockHash
	r.note(func(r *recorder) { refuse = r.refuse })
	if refuse != 0 && slices.Contains(blocksOf(evs), refuse) {
		r.add(call{"refuse", w, blocksOf(evs)})
		r.f.Resync(w, "refused")
		return
	}
	r.add(call{"apply", w, blocksOf(evs)})
}

func (r *recorder) Remove(w string) { r.add(call{"remove", w, nil}) }

func (r *recorder) note(f func(r *recorder)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

func (r *recorder) snapshot() ([]call, []string, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), slices.Clone(r.resyncs), r.gaps, r.dupes
}

type harness struct {
	rec *recorder
	f   *Follower
}

const backoffMin = 20 * time.Millisecond

// start runs a follower against sched, served on n, until the test ends.
func start(t *testing.T, n *servicetest.Bufnet, sched *servicetest.FakeScheduler, opts ...func(*Config)) *harness {
	t.Helper()
	h := &harness{rec: &recorder{}}
	cfg := Config{
		Backoff:     servicekit.Backoff{Min: backoffMin, Max: 200 * time.Millisecond},
		Dial:        n.Dial,
		Logger:      servicetest.Discard,
		OnResync:    func(w, reason string) { h.rec.note(func(r *recorder) { r.resyncs = append(r.resyncs, w+":"+reason) }) },
		OnGap:       func(string) { h.rec.note(func(r *recorder) { r.gaps++ }) },
		OnDuplicate: func(string) { h.rec.note(func(r *recorder) { r.dupes++ }) },
		OnBatch:     func(string, int) { h.rec.note(func(r *recorder) { r.batches++ }) },
		OnSubscribe: func(w string, _ grpc.ClientConnInterface) {
			h.rec.note(func(r *recorder) { r.streams = append(r.streams, "subscribe "+w) })
		},
		OnEnd: func(w string) { h.rec.note(func(r *recorder) { r.streams = append(r.streams, "end "+w) }) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.f = New(cfg, h.rec)
	h.rec.f = h.f
	conn, err := n.Dial(n.Serve(sched.Register))
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

// startIdle runs a follower of one worker, w0, with nothing cached yet, past
// its first resync.
func startIdle(t *testing.T) (*harness, *servicetest.FakeShim) {
	t.Helper()
	n := servicetest.NewBufnet(t)
	sh, w := shimOn(n, "w0")
	h := start(t, n, servicetest.NewFakeScheduler(w))
	h.callsAre(t, "resync(w0 [])")
	return h, sh
}

// shimOn serves a fake shim of worker id on n.
func shimOn(n *servicetest.Bufnet, id string) (*servicetest.FakeShim, *workerv1.Worker) {
	sh := servicetest.NewFakeShim(id)
	return sh, &workerv1.Worker{WorkerId: id, Address: n.Serve(sh.Register), Epoch: 1}
}

// callsAre waits until the sink has seen exactly want (as strings).
func (h *harness) callsAre(t *testing.T, want ...string) {
	t.Helper()
	var got []call
	if !servicetest.Poll(servicetest.Patience, func() bool {
		got, _, _, _ = h.rec.snapshot()
		return slices.EqualFunc(got, want, func(c call, w string) bool { return c.String() == w })
	}) {
		t.Fatalf("sink calls %v, want %v", got, want)
	}
}

// resyncsAre waits until OnResync has been told exactly want
// ("worker:reason"); it is called just after the Sink's Resync.
func (h *harness) resyncsAre(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	if !servicetest.Poll(servicetest.Patience, func() bool { _, got, _, _ = h.rec.snapshot(); return slices.Equal(got, want) }) {
		t.Fatalf("resyncs %v, want %v", got, want)
	}
}

// ---- tests ---------------------------------------------------------------------

func TestSnapshotThenLive(t *testing.T) {
	n := servicetest.NewBufnet(t)
	sh, w := shimOn(n, "w0")
	sh.Publish(stored(1, 2))
	h := start(t, n, servicetest.NewFakeScheduler(w))

	h.callsAre(t, "resync(w0 [1 2])")
	sh.Publish(stored(3))
	sh.Publish(stored(4))
	h.callsAre(t, "resync(w0 [1 2])", "apply(w0 [3])", "apply(w0 [4])")
	_, resyncs, gaps, _ := h.rec.snapshot()
	if !slices.Equal(resyncs, []string{"w0:start"}) || gaps != 0 {
		t.Fatalf("resyncs %v, gaps %d", resyncs, gaps)
	}
	if h.f.Followed() != 1 {
		t.Fatalf("followed %d", h.f.Followed())
	}
	if got := froms(sh); !slices.Equal(got, []uint64{2}) {
		t.Errorf("subscribed from %v, want [2] (after the snapshot's sequence 1)", got)
	}
}

func TestDuplicatesAreSkipped(t *testing.T) {
	n := servicetest.NewBufnet(t)
	sh, w := shimOn(n, "w0")
	sh.Duplicate(true)
	h := start(t, n, servicetest.NewFakeScheduler(w))
	h.callsAre(t, "resync(w0 [])")
	sh.Publish(stored(1))
	sh.Publish(stored(2))
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "apply(w0 [2])")
	servicetest.Eventually(t, "duplicates counted", func() bool { _, _, _, d := h.rec.snapshot(); return d == 2 })
}

func TestGapReplaysFromTheBuffer(t *testing.T) {
	h, sh := startIdle(t)

	sh.Publish(stored(1))
	// Once 1 is applied the stream is live (past its replay), so hiding 2
	// from live delivery makes a gap.
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])")
	sh.PublishHidden(stored(2)) // lost on the live stream, still buffered
	sh.Publish(stored(3))
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "apply(w0 [2])", "apply(w0 [3])")
	_, resyncs, gaps, _ := h.rec.snapshot()
	if gaps != 1 || !slices.Equal(resyncs, []string{"w0:start"}) {
		t.Fatalf("gaps %d, resyncs %v: want one gap healed by replay alone", gaps, resyncs)
	}
	if got, snaps := froms(sh), sh.Calls().Snapshots; !slices.Equal(got, []uint64{1, 2}) || snaps != 1 {
		t.Errorf("subscribed from %v with %d snapshots, want [1 2] and 1", got, snaps)
	}
}

func TestGapBeyondTheBufferReloads(t *testing.T) {
	h, sh := startIdle(t)

	sh.Publish(stored(1))
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])")
	sh.PublishHidden(stored(2))
	sh.Forget(3) // the replay cannot serve 2 any more
	sh.Publish(stored(3))
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "resync(w0 [1 2 3])")
	h.resyncsAre(t, "w0:start", "w0:out_of_range")
}

func TestReplaysWithoutProgressFallBackToTheSnapshot(t *testing.T) {
	h, sh := startIdle(t)

	// The shim skips sequence 1 even in replays: hidden and gone from the
	// log, yet it claims to buffer from 1.
	sh.PublishLost(stored(1))
	sh.Publish(stored(2))
	h.callsAre(t, "resync(w0 [])", "resync(w0 [1 2])")
	h.resyncsAre(t, "w0:start", "w0:gap")
	if _, _, gaps, _ := h.rec.snapshot(); gaps != DefaultConfig().MaxReplays+1 {
		t.Fatalf("gaps %d, want %d", gaps, DefaultConfig().MaxReplays+1)
	}
}

func TestNewEpochOnTheStreamReloads(t *testing.T) {
	n := servicetest.NewBufnet(t)
	sh, w := shimOn(n, "w0")
	sh.Publish(stored(1))
	sched := servicetest.NewFakeScheduler(w)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [1])")
	// A stream opened after the restart would start in the new epoch; this
	// test is about one that sees the epoch change.
	waitLive(t, sh, 1)

	sh.Restart()
	sh.Publish(stored(7))
	h.callsAre(t, "resync(w0 [1])", "resync(w0 [7])")
	h.resyncsAre(t, "w0:start", "w0:epoch")
	sh.Publish(stored(8))
	h.callsAre(t, "resync(w0 [1])", "resync(w0 [7])", "apply(w0 [8])")
	// The scheduler tells of the restart after the stream did: the new
	// process's cache, loaded already, stays.
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, &workerv1.Worker{WorkerId: "w0", Address: w.GetAddress(), Epoch: 2})
	sh.Publish(stored(9))
	h.callsAre(t, "resync(w0 [1])", "resync(w0 [7])", "apply(w0 [8])", "apply(w0 [9])")
}

func TestSchedulerAnnouncedEpochFollowsAfresh(t *testing.T) {
	n := servicetest.NewBufnet(t)
	sh, w := shimOn(n, "w0")
	sh.Publish(stored(1))
	sched := servicetest.NewFakeScheduler(w)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [1])")
	waitLive(t, sh, 1) // else a subscription after the restart finds it out itself

	// The shim restarted and is idle: only the scheduler knows. Its old
	// blocks go at once; the new process is not a cache lost, so the
	// follower stays caught up while it loads.
	sh.Restart()
	sh.Freeze()
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, &workerv1.Worker{WorkerId: "w0", Address: w.GetAddress(), Epoch: 2})
	h.callsAre(t, "resync(w0 [1])", "remove(w0 [])")
	if !h.f.CaughtUp() {
		t.Error("not caught up while the restarted w0 loads")
	}
	sh.Thaw()
	h.callsAre(t, "resync(w0 [1])", "remove(w0 [])", "resync(w0 [])")
	// The same epoch again changes nothing.
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, &workerv1.Worker{WorkerId: "w0", Address: w.GetAddress(), Epoch: 2})
	sh.Publish(stored(5))
	h.callsAre(t, "resync(w0 [1])", "remove(w0 [])", "resync(w0 [])", "apply(w0 [5])")
}

func TestRemovedWorkerIsDropped(t *testing.T) {
	n := servicetest.NewBufnet(t)
	sh, w := shimOn(n, "w0")
	sched := servicetest.NewFakeScheduler(w)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [])")
	waitLive(t, sh, 1)

	if n, ok := h.f.DPRanks("w0"); !ok || n != 1 {
		t.Fatalf("w0's ranks %d, %v; want 1, in the fleet", n, ok)
	}
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, &workerv1.Worker{WorkerId: "w0"})
	h.callsAre(t, "resync(w0 [])", "remove(w0 [])")
	waitLive(t, sh, 0)
	if h.f.Followed() != 0 {
		t.Fatalf("followed %d", h.f.Followed())
	}
	if _, ok := h.f.DPRanks("w0"); ok {
		t.Fatal("a removed worker is still in the fleet")
	}
	sh.Publish(stored(1)) // nobody listens any more
	// No stream is open to carry it. The check waits on an event, not a
	// sleep: the follower handles a later watch event (w1 joining), and by
	// then the sink has still seen nothing more of w0.
	_, w1 := shimOn(n, "w1")
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, w1)
	h.callsAre(t, "resync(w0 [])", "remove(w0 [])", "resync(w1 [])")
}

func TestWorkerGoneWhileNotWatchingIsDropped(t *testing.T) {
	n := servicetest.NewBufnet(t)
	_, w0 := shimOn(n, "w0")
	_, w1 := shimOn(n, "w1")
	sched := servicetest.NewFakeScheduler(w0)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [])")
	servicetest.Eventually(t, "the first watch", func() bool { return sched.Watches() >= 1 })

	// The watch breaks; when it comes back w0 is gone and w1 is new.
	sched.Rewatch(w1)
	servicetest.Eventually(t, "the second watch", func() bool { return sched.Watches() >= 2 })
	servicetest.Eventually(t, "w0 dropped, w1 followed", func() bool {
		calls, _, _, _ := h.rec.snapshot()
		var s []string
		for _, c := range calls {
			s = append(s, c.String())
		}
		return slices.Contains(s, "remove(w0 [])") && slices.Contains(s, "resync(w1 [])") && h.f.Followed() == 1
	})
	if _, ok := h.f.DPRanks("w0"); ok {
		t.Fatal("a worker gone while not watching is still in the fleet")
	}
}

func TestMovedWorkerIsDroppedAndFollowedAtItsNewAddress(t *testing.T) {
	n := servicetest.NewBufnet(t)
	_, w := shimOn(n, "w0")
	moved, w2 := shimOn(n, "w0")
	moved.Publish(stored(9))
	sched := servicetest.NewFakeScheduler(w)
	h := start(t, n, sched)
	h.callsAre(t, "resync(w0 [])")
	w2.DpSize = 4
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED, w2)
	h.callsAre(t, "resync(w0 [])", "remove(w0 [])", "resync(w0 [9])")
	// Moved, it stays in the fleet, with the ranks it announces now.
	if n, ok := h.f.DPRanks("w0"); !ok || n != 4 {
		t.Fatalf("moved w0's ranks %d, %v; want 4, in the fleet", n, ok)
	}
}

func TestReconnectsWithBackoff(t *testing.T) {
	n := servicetest.NewBufnet(t)
	sh, w := shimOn(n, "w0")
	sh.FailSubscribes(3)
	h := start(t, n, servicetest.NewFakeScheduler(w))

	servicetest.Eventually(t, "fourth subscription", func() bool { return len(sh.Calls().Subscribes) >= 4 })
	sh.Publish(stored(1))
	h.callsAre(t, "resync(w0 [])", "resync(w0 [])", "resync(w0 [])", "resync(w0 [])", "apply(w0 [1])")
	h.resyncsAre(t, "w0:start", "w0:reconnect", "w0:reconnect", "w0:reconnect")
	// Each retry waits at least the backoff, doubling (less 25% jitter);
	// only lower bounds: a loaded machine can only stretch the gaps.
	subs := sh.Calls().Subscribes
	for i := 1; i < 4; i++ {
		min := time.Duration(float64(backoffMin<<(i-1)) * 0.75)
		if gap := subs[i].At.Sub(subs[i-1].At); gap < min {
			t.Errorf("retry %d after %v, want ≥ %v", i, gap, min)
		}
	}
}

func TestUnreachableSchedulerIsRetriedUntilStopped(t *testing.T) {
	n := servicetest.NewBufnet(t)
	rec := &recorder{}
	f := New(Config{Backoff: servicekit.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}, Dial: n.Dial,
		Logger: servicetest.Discard}, rec)
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

// Resync ends the open subscription and reloads the snapshot at once, and
// the hooks see the subscription end and the next one open.
func TestResyncReloadsAtOnce(t *testing.T) {
	h, sh := startIdle(t)
	waitLive(t, sh, 1)
	sh.Publish(stored(1))
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])")

	h.f.Resync("w0", "asked")
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "resync(w0 [1])")
	h.resyncsAre(t, "w0:start", "w0:asked")
	// The hooks, not the shim's count of open streams: the old stream's
	// handler may not have counted itself out yet, nor the follower have
	// heard of the new one.
	want := []string{"subscribe w0", "end w0", "subscribe w0"}
	var streams []string
	servicetest.Eventually(t, "the subscription ended and opened again", func() bool {
		h.rec.note(func(r *recorder) { streams = slices.Clone(r.streams) })
		return slices.Equal(streams, want)
	})
	h.f.Resync("nobody", "asked") // no subscription: nothing to do
}

// A Sink that calls Resync from Apply refuses the batch: it is not counted
// as applied, and the snapshot (which has it) follows.
func TestSinkRefusesABatch(t *testing.T) {
	h, sh := startIdle(t)
	h.rec.note(func(r *recorder) { r.refuse = 2 })
	sh.Publish(stored(1))
	sh.Publish(stored(2))
	h.callsAre(t, "resync(w0 [])", "apply(w0 [1])", "refuse(w0 [2])", "resync(w0 [1 2])")
	h.resyncsAre(t, "w0:start", "w0:refused")
	var batches int
	h.rec.note(func(r *recorder) { batches = r.batches })
	if batches != 1 {
		t.Errorf("%d batches counted as applied, want 1", batches)
	}
}

// The follower is caught up once the worker set is whole and every
// worker's snapshot has loaded: not while one snapshot hangs.
func TestCaughtUpAfterEverySnapshot(t *testing.T) {
	n := servicetest.NewBufnet(t)
	sh0, w0 := shimOn(n, "w0")
	sh1, w1 := shimOn(n, "w1")
	sh0.Publish(stored(1))
	sh1.Freeze()
	h := start(t, n, servicetest.NewFakeScheduler(w0, w1))
	h.callsAre(t, "resync(w0 [1])")
	if h.f.CaughtUp() {
		t.Fatal("caught up while w1's snapshot hangs")
	}
	sh1.Thaw()
	if !servicetest.Poll(servicetest.Patience, h.f.CaughtUp) {
		t.Fatal("never caught up after w1's snapshot loaded")
	}
}

// caughtUpWithW0 is a follower caught up with one worker, w0, whose cache
// holds block 1.
func caughtUpWithW0(t *testing.T, opts ...func(*Config)) (*servicetest.Bufnet, *servicetest.FakeShim, *workerv1.Worker, *servicetest.FakeScheduler, *harness) {
	t.Helper()
	n := servicetest.NewBufnet(t)
	sh0, w0 := shimOn(n, "w0")
	sh0.Publish(stored(1))
	sched := servicetest.NewFakeScheduler(w0)
	h := start(t, n, sched, opts...)
	h.callsAre(t, "resync(w0 [1])")
	if !servicetest.Poll(servicetest.Patience, h.f.CaughtUp) {
		t.Fatal("never caught up with w0")
	}
	return n, sh0, w0, sched, h
}

// loseAndReadd has the follower lose w0 (a re-sync of the worker set
// without it, unless it is not followed already) and follow it again.
func loseAndReadd(t *testing.T, h *harness, sched *servicetest.FakeScheduler, w0 *workerv1.Worker) {
	t.Helper()
	if h.f.Followed() == 1 {
		sched.Rewatch() // a worker set without w0
		if !servicetest.Poll(servicetest.Patience, func() bool { return h.f.Followed() == 0 }) {
			t.Fatal("w0 was not dropped")
		}
	}
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, w0)
	if !servicetest.Poll(servicetest.Patience, func() bool { return h.f.Followed() == 1 }) {
		t.Fatal("w0 was not followed again")
	}
}

// Once caught up, the follower stays so while a worker that joins later
// loads its snapshot: that one worker is not known yet, every other one is,
// and the index must keep answering for them.
func TestCaughtUpStaysWhileAJoiningWorkerLoads(t *testing.T) {
	n, _, _, sched, h := caughtUpWithW0(t)
	sh1, w1 := shimOn(n, "w1")
	sh1.Freeze()
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, w1)
	if !servicetest.Poll(servicetest.Patience, func() bool { return h.f.Followed() == 2 }) {
		t.Fatal("w1 was not followed")
	}
	if !h.f.CaughtUp() {
		t.Fatal("no longer caught up while the joining w1's snapshot hangs")
	}
	sh1.Thaw()
}

// A worker whose cache the follower had and lost (here: a re-sync of the
// worker set that did not list it, as a scheduler restarting may send, then
// the worker back, the same process) counts against being caught up until
// its snapshot has loaded again: the sink is missing a warm cache.
func TestCaughtUpWaitsForAWorkerItLost(t *testing.T) {
	_, sh0, w0, sched, h := caughtUpWithW0(t)
	sh0.Freeze()
	loseAndReadd(t, h, sched, w0)
	h.callsAre(t, "resync(w0 [1])", "remove(w0 [])")
	if h.f.CaughtUp() {
		t.Fatal("caught up while the cache it lost (w0's) has not loaded again")
	}
	sh0.Thaw()
	if !servicetest.Poll(servicetest.Patience, h.f.CaughtUp) {
		t.Fatal("not caught up again after w0's snapshot loaded")
	}
	h.callsAre(t, "resync(w0 [1])", "remove(w0 [])", "resync(w0 [1])")
}

// An empty worker set, heard whole, is the whole fleet.
func TestCaughtUpWithNoWorkers(t *testing.T) {
	h := start(t, servicetest.NewBufnet(t), servicetest.NewFakeScheduler())
	if !servicetest.Poll(servicetest.Patience, h.f.CaughtUp) {
		t.Fatal("not caught up with an empty fleet")
	}
}

// A lost cache stops counting when its worker leaves again before loading,
// and after ReloadWait when it cannot be reached.
func TestALostCacheCountsOnlyWhileItMayComeBack(t *testing.T) {
	const wait = 2 * time.Second
	_, sh0, w0, sched, h := caughtUpWithW0(t, func(c *Config) { c.ReloadWait = wait })
	sh0.Freeze()
	lose := func() {
		t.Helper()
		loseAndReadd(t, h, sched, w0)
		if h.f.CaughtUp() {
			t.Fatal("w0's lost cache, being loaded again, does not count")
		}
	}
	lose()
	left := time.Now()
	sched.Set(schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED, w0)
	if !servicetest.Poll(servicetest.Patience, h.f.CaughtUp) {
		t.Fatal("not caught up once w0 left again before loading")
	}
	if waited := time.Since(left); waited >= wait/2 {
		t.Fatalf("caught up %v after w0 left: ReloadWait's doing, not its leaving", waited)
	}
	lose()
	start := time.Now()
	if !servicetest.Poll(servicetest.Patience, h.f.CaughtUp) {
		t.Fatal("an unreachable lost worker kept the follower from being caught up")
	}
	if waited := time.Since(start); waited < wait/2 {
		t.Fatalf("caught up after %v, before ReloadWait (%v)", waited, wait)
	}
	sh0.Thaw()
}
