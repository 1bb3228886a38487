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
	// Apply applies the events of one batch, in order.
	Apply(worker string, events []kv.Event)
	// Remove forgets a worker that left the fleet (or moved).
	Remove(worker string)
}

// Config tunes a Follower. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// BackoffMin and BackoffMax pace reconnections to the scheduler and shims.
	BackoffMin, BackoffMax time.Duration
	// MaxReplays is how many gap replays in a row without progress are tried
	// before falling back to the snapshot, so a shim that keeps skipping
	// sequences cannot spin a follower.
	MaxReplays int
	// Dial connects to a shim; servicekit.Dial when nil.
	Dial func(addr string) (*grpc.ClientConn, error)
	// Logger; slog.Default when nil.
	Logger *slog.Logger
	// OnResync, when set, is told each snapshot reload and why: "start",
	// "epoch", "out_of_range", "gap" (replays exhausted), "reconnect".
	OnResync func(worker, reason string)
	// OnGap, when set, is told each sequence gap seen.
	OnGap func(worker string)
	// OnBatch, when set, is told each batch applied.
	OnBatch func(worker string, events int)
	// OnDuplicate, when set, is told each batch skipped because it was
	// already applied (replay overlap, duplicates, reordering).
	OnDuplicate func(worker string)
}

// DefaultConfig is what zero fields mean.
func DefaultConfig() Config {
	return Config{BackoffMin: 100 * time.Millisecond, BackoffMax: 5 * time.Second, MaxReplays: 2}
}

// Follower follows the fleet for one Sink.
type Follower struct {
	cfg      Config
	sink     Sink
	followed atomic.Int64
}

// New returns a follower feeding sink.
func New(cfg Config, sink Sink) *Follower {
	d := DefaultConfig()
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = d.BackoffMin
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = d.BackoffMax
	}
	if cfg.MaxReplays <= 0 {
		cfg.MaxReplays = d.MaxReplays
	}
	if cfg.Dial == nil {
		cfg.Dial = func(addr string) (*grpc.ClientConn, error) { return servicekit.Dial(addr) }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Follower{cfg: cfg, sink: sink}
}

// Followed is the number of workers whose streams are followed now.
func (f *Follower) Followed() int { return int(f.followed.Load()) }

// subscription follows one worker in its own goroutine.
type subscription struct {
	addr   string
	epoch  uint64 // as the scheduler announced it
	cancel context.CancelFunc
	done   chan struct{}
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
	start := func(id, addr string, epoch uint64) {
		sctx, cancel := context.WithCancel(ctx)
		sub := &subscription{addr: addr, epoch: epoch, cancel: cancel, done: make(chan struct{})}
		subs[id] = sub
		f.followed.Store(int64(len(subs)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(sub.done)
			f.follow(sctx, id, addr)
		}()
	}
	defer func() {
		for id := range subs {
			stop(id)
		}
		wg.Wait()
	}()

	client := schedulerv1.NewSchedulerServiceClient(conn)
	bo := servicekit.Backoff{Min: f.cfg.BackoffMin, Max: f.cfg.BackoffMax}
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
				sub, ok := subs[id]
				switch {
				case ok && sub.addr != w.GetAddress():
					drop(id) // moved: its old cache is not the new one
				case ok && (w.GetEpoch() == 0 || sub.epoch == 0 || w.GetEpoch() == sub.epoch):
					continue
				case ok:
					// The shim restarted. Its stream shows the new epoch only
					// with its next batch, so an idle restarted worker would
					// keep its old blocks until then: follow afresh now.
					stop(id)
				}
				start(id, w.GetAddress(), w.GetEpoch())
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED:
				drop(id)
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED:
				if synced {
					continue
				}
				synced = true
				for id := range subs {
					if !seen[id] {
						drop(id)
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

// follow keeps the sink in step with one worker until ctx ends.
func (f *Follower) follow(ctx context.Context, worker, addr string) {
	log := f.cfg.Logger.With("worker", worker)
	conn, err := f.cfg.Dial(addr)
	if err != nil {
		log.Error("dial shim", "addr", addr, "err", err)
		return
	}
	defer conn.Close()
	client := enginev1.NewEngineShimServiceClient(conn)
	bo := servicekit.Backoff{Min: f.cfg.BackoffMin, Max: f.cfg.BackoffMax}
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
			log.Info("worker loaded from snapshot", "epoch", snap.GetEpoch(), "sequence", snap.GetSequence(), "events", len(snap.GetEvents()))
			if f.cfg.OnResync != nil {
				f.cfg.OnResync(worker, reason)
			}
			epoch, last, synced, replays = snap.GetEpoch(), snap.GetSequence(), true, 0
		}
		before := last
		err := f.stream(ctx, client, worker, epoch, &last)
		if last != before {
			bo.Reset() // progress: the next hiccup waits only briefly
			replays = 0
		}
		// When the shim answered but the stream cannot continue, reload at
		// once; when the shim did not answer, back off first.
		immediate := true
		switch {
		case ctx.Err() != nil:
			return
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
// a batch does not continue the state the sink holds.
func (f *Follower) stream(ctx context.Context, client enginev1.EngineShimServiceClient, worker string, epoch uint64, last *uint64) error {
	st, err := client.SubscribeKvEvents(ctx, &enginev1.SubscribeKvEventsRequest{FromSequence: *last + 1})
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return errors.New("shim closed the stream")
		}
		if err != nil {
			return err
		}
		b := resp.GetBatch()
		switch {
		case b.GetEpoch() != epoch:
			return errEpoch
		case b.GetSequence() <= *last:
			if f.cfg.OnDuplicate != nil {
				f.cfg.OnDuplicate(worker)
			}
			continue
		case b.GetSequence() != *last+1:
			return errGap
		}
		events := kvwire.EventsFromProto(b.GetEvents())
		f.sink.Apply(worker, events)
		if f.cfg.OnBatch != nil {
			f.cfg.OnBatch(worker, len(events))
		}
		*last = b.GetSequence()
	}
}
