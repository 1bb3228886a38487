// Package kvfollow keeps a service in step with the fleet's KV events. It
// watches the scheduler's worker set and follows every live worker's event
// stream: snapshot first, then batches from the snapshot's sequence on. A
// sequence gap re-subscribes from the last applied batch (the shim replays it
// from its buffer); a new epoch, or a range the shim no longer buffers, reloads
// the snapshot. Workers that leave are dropped. The flash indexer and the
// session-prefix indexer both build their state this way.
package kvfollow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// Sink is the state kept in step. Calls for one worker come in stream order
// from one goroutine; calls for different workers may be concurrent.
type Sink interface {
	// Resync replaces everything known about the worker with its snapshot.
	Resync(worker string, events []kv.Event)
	// Apply applies the events of one batch, in order. It may instead call
	// the Follower's Resync for the worker: then the batch does not count
	// as applied, and the snapshot follows. The events and their Blocks are
	// the decoder's storage, which the next batch overwrites: Apply keeps
	// no slice of them, only copies.
	Apply(worker string, events []kv.Event)
	// Remove forgets a worker that left the fleet (or moved).
	Remove(worker string)
}

// Config tunes a Follower. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Backoff paces reconnections to the scheduler and shims.
	Backoff servicekit.Backoff
	// MaxReplays is how many gap replays in a row without progress are tried
	// before falling back to the snapshot, so a shim that keeps skipping
	// sequences cannot spin a follower.
	MaxReplays int
	// Dial connects to a shim; servicekit.Dial when nil.
	Dial func(addr string) (*grpc.ClientConn, error)
	// ReloadWait bounds how long a cache the sink had and lost, being
	// loaded again, counts against CaughtUp: a worker the follower cannot
	// reach while the scheduler still lists it must not hold the sink out
	// of service for good (DefaultConfig: 10 s).
	ReloadWait time.Duration
	// Logger; slog.Default when nil.
	Logger *slog.Logger
	// OnResync, when set, is told each snapshot reload and why: "start",
	// "epoch", "out_of_range", "gap" (replays exhausted), "reconnect", or the
	// reason given to Resync.
	OnResync func(worker, reason string)
	// OnGap, when set, is told each sequence gap seen.
	OnGap func(worker string)
	// OnBatch, when set, is told each batch applied.
	OnBatch func(worker string, events int)
	// OnDuplicate, when set, is told each batch skipped because it was
	// already applied (replay overlap, duplicates, reordering).
	OnDuplicate func(worker string)
	// OnSubscribe, when set, is told each subscription to a worker's events
	// that opened, with the connection it runs on (to ask the shim more over
	// the same path); OnEnd is told when it ended, for whatever reason.
	OnSubscribe func(worker string, conn grpc.ClientConnInterface)
	OnEnd       func(worker string)
}

// DefaultConfig is what zero fields mean.
func DefaultConfig() Config {
	return Config{Backoff: servicekit.DefaultBackoff(), MaxReplays: 2, ReloadWait: 10 * time.Second}
}

// Follower follows the fleet for one Sink.
type Follower struct {
	cfg      Config
	sink     Sink
	followed atomic.Int64
	// watched: the worker set has been heard whole (SYNCED) once; loading
	// counts the subscriptions that have not loaded their first snapshot;
	// caughtUp is set the first moment both held; from then on reloading
	// counts those of them that follow again a worker whose cache the sink
	// had and lost (CaughtUp).
	watched   atomic.Bool
	loading   atomic.Int64
	caughtUp  atomic.Bool
	reloading atomic.Int64

	mu   sync.Mutex
	open map[string]*openStream // worker → its subscription open now
	// ranks is, per worker of the fleet followed, its data-parallel ranks
	// (DPRanks).
	ranks map[string]uint32
	// had is, per worker, the address and epoch of the last snapshot the
	// sink loaded of it.
	had map[string]workerCache
}

// workerCache names one worker process's cache: where it ran and the
// epoch its snapshot carried (the shim's own).
type workerCache struct {
	addr  string
	epoch uint64
}

// openStream is a worker's open subscription, as Resync finds it.
type openStream struct {
	cancel context.CancelFunc
	resync string // the reason Resync gave; "" until it is called
}

// New returns a follower feeding sink.
func New(cfg Config, sink Sink) *Follower {
	d := DefaultConfig()
	cfg.Backoff = cfg.Backoff.WithDefaults()
	if cfg.MaxReplays <= 0 {
		cfg.MaxReplays = d.MaxReplays
	}
	if cfg.ReloadWait <= 0 {
		cfg.ReloadWait = d.ReloadWait
	}
	if cfg.Dial == nil {
		cfg.Dial = func(addr string) (*grpc.ClientConn, error) { return servicekit.Dial(addr) }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Follower{cfg: cfg, sink: sink, open: map[string]*openStream{}, had: map[string]workerCache{}, ranks: map[string]uint32{}}
}

// DPRanks is how many data-parallel ranks worker runs (1 when it announces
// none, as a shim of one rank does), and whether it is in the fleet the
// follower follows.
func (f *Follower) DPRanks(worker string) (uint32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.ranks[worker]
	return n, ok
}

func (f *Follower) setRanks(worker string, n uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n == 0 {
		delete(f.ranks, worker)
		return
	}
	f.ranks[worker] = n
}

// Followed is the number of workers whose streams are followed now.
func (f *Follower) Followed() int { return int(f.followed.Load()) }

// CaughtUp is whether the sink holds the fleet: the worker set has been
// heard whole and every worker then followed has had its snapshot loaded,
// and since then no worker whose cache the sink had has been lost and not
// yet loaded again (dropped by a re-sync of the worker set, or removed and
// back, with the same address and epoch; for at most Config.ReloadWait).
// A replica of a service built this way answers for the fleet only while
// it is (servicekit.CaughtUpService).
// A worker that joins later, or comes back as a new process (another
// address or epoch: its old blocks are dropped at once), does not count
// against it: until its snapshot loads the sink has that one worker's cache
// as it was when the process started, little or nothing, and every other
// worker's. Counting it had every scheduler stop asking the flash indexer,
// cache-blind for every session, while one snapshot loaded: the turns right
// after a fleet started were routed as if every cache were empty, and a
// session's second turn could leave the worker holding its first
// (TestSecondTurnHitsCacheOnSameWorker failed 3 times in 40).
func (f *Follower) CaughtUp() bool { return f.caughtUp.Load() && f.reloading.Load() == 0 }

// settle sets caughtUp once the worker set has been heard whole and no
// subscription awaits its first snapshot; it runs after each of the two
// changes.
func (f *Follower) settle() {
	if f.watched.Load() && f.loading.Load() == 0 {
		f.caughtUp.Store(true)
	}
}

// lost reports whether following id at addr with epoch reloads a cache the
// sink had: the same worker process as its last loaded snapshot's (an
// epoch not announced matches any).
func (f *Follower) lost(id, addr string, epoch uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.had[id]
	return ok && h.addr == addr && (h.epoch == epoch || h.epoch == 0 || epoch == 0)
}

// loadedFrom records that the sink loaded id's snapshot from addr, of the
// shim's epoch.
func (f *Follower) loadedFrom(id, addr string, epoch uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.had[id] = workerCache{addr: addr, epoch: epoch}
}

// subscription follows one worker in its own goroutine.
type subscription struct {
	addr  string
	epoch uint64 // as the scheduler announced it
	// loadedEpoch is the epoch of the last snapshot loaded (0: none yet):
	// the shim's own word, which may come before the scheduler's.
	loadedEpoch atomic.Uint64
	cancel      context.CancelFunc
	done        chan struct{}
}

// Run keeps one subscription per live worker, re-watching the scheduler (on
// conn) with backoff whenever its stream breaks. It returns when ctx ends,
// after every subscription has stopped.
func (f *Follower) Run(ctx context.Context, conn *grpc.ClientConn) {
	var wg sync.WaitGroup
	subs := map[string]*subscription{}
	stop := func(id string) {
		sub := subs[id]
		sub.cancel()
		<-sub.done
		delete(subs, id)
		f.followed.Store(int64(len(subs)))
	}
	drop := func(id string) {
		if _, ok := subs[id]; ok {
			stop(id)
		}
		f.sink.Remove(id)
		f.cfg.Logger.Info("worker dropped", "worker", id)
	}
	// leave drops a worker that left the fleet: out of it (DPRanks) before
	// its cache goes, so that nothing is predicted for it after.
	leave := func(id string) {
		f.setRanks(id, 0)
		drop(id)
	}
	start := func(id, addr string, epoch uint64) {
		sctx, cancel := context.WithCancel(ctx)
		sub := &subscription{addr: addr, epoch: epoch, cancel: cancel, done: make(chan struct{})}
		// Counted before the worker shows as followed: whoever sees it
		// followed sees it loading.
		f.loading.Add(1)
		// A lost cache counts until it has loaded again, the subscription
		// ends, or ReloadWait has passed, whichever comes first.
		var unblock func()
		if f.lost(id, addr, epoch) {
			f.reloading.Add(1)
			var once sync.Once
			release := func() { once.Do(func() { f.reloading.Add(-1) }) }
			t := time.AfterFunc(f.cfg.ReloadWait, release)
			unblock = func() { t.Stop(); release() }
		}
		subs[id] = sub
		f.followed.Store(int64(len(subs)))
		var once sync.Once
		done := func() {
			once.Do(func() {
				f.loading.Add(-1)
				if unblock != nil {
					unblock()
				}
				f.settle()
			})
		}
		loaded := func(shimEpoch uint64) {
			sub.loadedEpoch.Store(shimEpoch)
			f.loadedFrom(id, addr, shimEpoch)
			done()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(sub.done)
			defer done() // stopped before its snapshot: no longer awaited
			f.follow(sctx, id, addr, loaded)
		}()
	}
	defer func() {
		for id := range subs {
			stop(id)
		}
		wg.Wait()
	}()

	client := schedulerv1.NewSchedulerServiceClient(conn)
	bo := f.cfg.Backoff
	for ctx.Err() == nil {
		stream, err := client.WatchWorkers(ctx, &schedulerv1.WatchWorkersRequest{})
		if err != nil {
			f.cfg.Logger.Warn("watch workers", "err", err)
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		// Workers announced before SYNCED make up the live set; any other we
		// follow left while we were not watching.
		seen := map[string]bool{}
		synced := false
		for {
			ev, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					f.cfg.Logger.Warn("worker watch ended", "err", err)
				}
				break
			}
			bo.Reset()
			w := ev.GetWorker()
			id := w.GetWorkerId()
			switch ev.GetType() {
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED:
				if id == "" || w.GetAddress() == "" {
					continue
				}
				seen[id] = true
				f.setRanks(id, max(1, w.GetDpSize()))
				sub, ok := subs[id]
				switch {
				case ok && sub.addr != w.GetAddress():
					drop(id) // moved: its old cache is not the new one
				case ok && (w.GetEpoch() == 0 || sub.epoch == 0 || w.GetEpoch() == sub.epoch):
					continue
				case ok && w.GetEpoch() == sub.loadedEpoch.Load():
					// The shim's stream told of the restart first, and the
					// subscription has loaded the new process already.
					sub.epoch = w.GetEpoch()
					continue
				case ok:
					// The shim restarted. Its stream shows the new epoch only
					// with its next batch, so an idle restarted worker would
					// keep its old blocks until then: they are dropped, and
					// it is followed afresh, now.
					stop(id)
					f.sink.Remove(id)
				}
				start(id, w.GetAddress(), w.GetEpoch())
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED:
				leave(id)
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED:
				if synced {
					continue
				}
				synced = true
				f.watched.Store(true)
				f.settle()
				for id := range subs {
					if !seen[id] {
						leave(id)
					}
				}
			}
		}
		if !bo.Wait(ctx) {
			return
		}
	}
}

var (
	errGap   = errors.New("sequence gap")
	errEpoch = errors.New("new epoch")
)

// Resync ends worker's open subscription, if one is, and reloads the
// worker's snapshot at once, telling OnResync reason. A batch that arrived
// before may still be applied; the snapshot then replaces it.
func (f *Follower) Resync(worker, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.open[worker]; o != nil && o.resync == "" {
		o.resync = reason
		o.cancel()
	}
}

// resyncRequested is the reason Resync gave for worker's open subscription,
// "" if it was not called.
func (f *Follower) resyncRequested(worker string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.open[worker]; o != nil {
		return o.resync
	}
	return ""
}

// resyncError is a subscription Resync ended, and why.
type resyncError struct{ reason string }

func (e resyncError) Error() string { return "resync asked for: " + e.reason }

// follow keeps the sink in step with one worker until ctx ends, calling
// loaded with the shim's epoch after each snapshot it loads.
func (f *Follower) follow(ctx context.Context, worker, addr string, loaded func(epoch uint64)) {
	log := f.cfg.Logger.With("worker", worker)
	conn, err := f.cfg.Dial(addr)
	if err != nil {
		log.Error("dial shim", "addr", addr, "err", err)
		return
	}
	defer conn.Close()
	client := enginev1.NewEngineShimServiceClient(conn)
	bo := f.cfg.Backoff
	var (
		synced      bool
		epoch, last uint64
		replays     int
	)
	reason := "start"
	for ctx.Err() == nil {
		if !synced {
			snap, err := client.GetKvSnapshot(ctx, &enginev1.GetKvSnapshotRequest{})
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("kv snapshot", "err", err)
				}
				if !bo.Wait(ctx) {
					return
				}
				continue
			}
			if id := snap.GetWorkerId(); id != "" && id != worker {
				log.Warn("snapshot names another worker", "snapshot_worker", id)
			}
			f.sink.Resync(worker, kvwire.EventsFromProto(snap.GetEvents()))
			loaded(snap.GetEpoch())
			log.Info("worker loaded from snapshot", "epoch", snap.GetEpoch(), "sequence", snap.GetSequence(), "events", len(snap.GetEvents()))
			if f.cfg.OnResync != nil {
				f.cfg.OnResync(worker, reason)
			}
			epoch, last, synced, replays = snap.GetEpoch(), snap.GetSequence(), true, 0
		}
		before := last
		err := f.stream(ctx, conn, worker, epoch, &last)
		if last != before {
			bo.Reset() // progress: the next hiccup waits only briefly
			replays = 0
		}
		// When the shim answered but the stream cannot continue, reload at
		// once; when the shim did not answer, back off first.
		immediate := true
		var asked resyncError
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &asked):
			synced, reason = false, asked.reason
		case errors.Is(err, errGap):
			if f.cfg.OnGap != nil {
				f.cfg.OnGap(worker)
			}
			// Re-subscribing from last+1 makes the shim replay the missing
			// batches from its buffer.
			if replays++; replays <= f.cfg.MaxReplays {
				continue
			}
			synced, reason = false, "gap"
		case errors.Is(err, errEpoch):
			synced, reason = false, "epoch"
		case status.Code(err) == codes.OutOfRange:
			synced, reason = false, "out_of_range"
		default:
			log.Warn("kv event stream", "err", err)
			// The shim may have restarted, and a restarted shim would show
			// its new epoch only once its sequence passed ours: reload.
			synced, reason, immediate = false, "reconnect", false
		}
		if immediate {
			continue
		}
		if !bo.Wait(ctx) {
			return
		}
	}
}

// stream applies batches after *last until an error: errGap or errEpoch when
// a batch does not continue the state the sink holds, resyncError when Resync
// ended it.
func (f *Follower) stream(ctx context.Context, conn *grpc.ClientConn, worker string, epoch uint64, last *uint64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := enginev1.NewEngineShimServiceClient(conn).SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: *last + 1})
	if err != nil {
		return err
	}
	f.opened(worker, conn, cancel)
	defer f.ended(worker)
	var (
		frame servicekit.Frame
		dec   kvwire.BatchDecoder
	)
	for {
		err := st.RecvMsg(&frame) // the answer's wire bytes, not a generated message
		if reason := f.resyncRequested(worker); reason != "" {
			return resyncError{reason}
		}
		if err == io.EOF {
			return errors.New("shim closed the stream")
		}
		if err != nil {
			return err
		}
		// The batch is decoded into the decoder's storage, which the next
		// one overwrites: the sink applies it before that.
		b, err := dec.DecodeResponse(frame.B)
		if err != nil {
			return fmt.Errorf("kv event batch: %w", err)
		}
		switch {
		case b.Epoch != epoch:
			return errEpoch
		case b.Sequence <= *last:
			if f.cfg.OnDuplicate != nil {
				f.cfg.OnDuplicate(worker)
			}
			continue
		case b.Sequence != *last+1:
			return errGap
		}
		f.sink.Apply(worker, b.Events)
		if reason := f.resyncRequested(worker); reason != "" {
			return resyncError{reason} // the sink refused the batch
		}
		if f.cfg.OnBatch != nil {
			f.cfg.OnBatch(worker, len(b.Events))
		}
		*last = b.Sequence
	}
}

// opened records worker's subscription as open for Resync, and tells
// OnSubscribe.
func (f *Follower) opened(worker string, conn *grpc.ClientConn, cancel context.CancelFunc) {
	f.mu.Lock()
	f.open[worker] = &openStream{cancel: cancel}
	f.mu.Unlock()
	if f.cfg.OnSubscribe != nil {
		f.cfg.OnSubscribe(worker, conn)
	}
}

// ended forgets worker's subscription, and tells OnEnd.
func (f *Follower) ended(worker string) {
	f.mu.Lock()
	delete(f.open, worker)
	f.mu.Unlock()
	if f.cfg.OnEnd != nil {
		f.cfg.OnEnd(worker)
	}
}
