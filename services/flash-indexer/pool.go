package flashindexer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// poolFollower keeps the index's shared-pool index in step with the kv-pool
// service's event stream: subscribe from the last event applied; a snapshot
// (first subscription, new epoch, fell behind) replaces the pool index; a
// gap the core detects clears it, and the follower resubscribes from zero to
// load a snapshot rather than wait for the pool to store everything again.
// An overflow (a pool holding more objects than Config.PoolMaxObjects) also
// clears it, but a snapshot would only overflow it again: the follower
// keeps following, and the index rebuilds from the events.
//
// Its pages count as hits under the rule a worker's blocks do
// (--stale-after, stale.go): while the stream shows no sign of life (a
// batch, a snapshot, or the pool answering the health probe over the
// subscription's connection) for longer than the bound, the pool index may
// list pages the pool dropped, or a pool that is gone, and FindMatches
// leaves the pool out. They count again once the pool index has caught up
// with a subscription opened while stale: once it has applied a batch that
// ends at the pool's last event when the pool sent it (caughtUp),
// which covers everything the pool had when the follower resubscribed. A
// pool that answers again but sends nothing (idle) is asked for a snapshot,
// and so is one whose stream was open all along: a batch on it may have
// been built before the silence.
type poolFollower struct {
	s    *Service
	addr string
	// pix is replaced when the pool's layout changes (a different pool).
	pix *flashindex.PoolIndex
	// resync asks the next subscription for a snapshot (after a clear).
	resync bool

	// fresh tracks the pool's stream under its address (one entry), watch
	// reads it for every lookup, prober probes the pool.
	fresh  *flashindex.Freshness
	watch  *flashindex.Watch
	prober *prober

	// The open subscription, for reload (the prober's goroutines).
	mu     sync.Mutex
	cancel context.CancelFunc // nil when none is open
	// loading: it brings a snapshot not loaded yet (it asked from zero, or
	// reload ended it for one); reload need not end it.
	loading  bool
	reloaded bool // reload ended it

	events, snapshots, gaps, badEvents, stale prometheus.Counter
}

func newPoolFollower(s *Service, addr string, reg prometheus.Registerer, name func(string) string) (*poolFollower, error) {
	f := &poolFollower{s: s, addr: addr,
		events:    prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_events_total"), Help: "Shared-pool events applied to the pool index."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_snapshots_total"), Help: "Shared-pool snapshots loaded."}),
		gaps:      prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_clears_total"), Help: "Times the pool index cleared itself (sequence gap, new epoch, overflow)."}),
		badEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_bad_events_total"), Help: "Shared-pool events with an unknown type or key, ignored."}),
		stale:     prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_stale_total"), Help: "Times the shared pool's event stream stayed down past --stale-after, so its pages stopped counting as hits."}),
		fresh:     flashindex.NewFreshness(s.cfg.StaleAfter),
	}
	// Stale until the first snapshot loads (no pool index is attached
	// before it anyway).
	f.watch = f.fresh.Watch(addr)
	f.prober = newProber(f.fresh, func() time.Time { return s.now() }, func(string) { f.reload() }, f.announce)
	staleGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name("pool_stale"),
		Help: "1 while the shared pool's pages do not count as hits: its event stream has shown no sign of life for --stale-after and the pool index has not caught up since (or no snapshot has loaded yet)."},
		func() float64 { return float64(f.fresh.Count(s.now())) })
	if err := servicekit.RegisterMetrics(reg, f.events, f.snapshots, f.gaps, f.badEvents, f.stale, staleGauge); err != nil {
		return nil, err
	}
	return f, nil
}

// staleAt reports whether the pool's pages must not count as hits at now:
// one atomic load, on every lookup.
func (f *poolFollower) staleAt(now time.Time) bool { return f.watch.Stale(now) }

// announce logs and counts the pool turning stale or caught up again.
func (f *poolFollower) announce(ts []flashindex.Transition) {
	for _, t := range ts {
		if t.Stale {
			f.stale.Inc()
			f.s.log.Warn("shared pool's events are stale: its pages no longer count as hits until the pool index catches up",
				"addr", f.addr, "last_seen_alive", t.Since, "stale_after", f.s.cfg.StaleAfter)
		} else {
			f.s.log.Info("shared pool index caught up with the pool's events: its pages count as hits", "addr", f.addr)
		}
	}
}

// run follows (and probes) the pool until ctx is done.
func (f *poolFollower) run(ctx context.Context) {
	if f.s.cfg.StaleAfter > 0 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.prober.run(ctx, f.s.cfg.probeInterval(), f.s.cfg.StaleAfter)
		}()
		defer func() { <-done }()
	}
	b := f.s.cfg.Backoff
	for ctx.Err() == nil {
		err := f.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errResubscribe) {
			b.Reset()
			continue
		}
		f.s.log.Debug("shared pool stream ended", "addr", f.addr, "err", err)
		if !b.Wait(ctx) {
			return
		}
	}
}

var errResubscribe = errors.New("pool index cleared: resubscribe for a snapshot")

// caughtUp reports whether b ends at the pool's last event when the pool
// sent it: the pool says so (PoolEventBatch.caught_up). A kv-pool from
// before that field (a rolling upgrade's) says nothing; its batch shorter
// than kvpool.MaxEventsPerBatch meant the same, which a current pool's
// batches keep (only the last of a backlog is short).
func caughtUp(b *kvpoolv1.PoolEventBatch) bool {
	return b.GetCaughtUp() || len(b.GetEvents()) < kvpool.MaxEventsPerBatch
}

func (f *poolFollower) follow(ctx context.Context) error {
	conn, err := f.s.dial(f.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var epoch, seq uint64
	if f.pix != nil && !f.resync {
		epoch, seq = f.pix.Position()
	}
	// A subscription ends only a staleness that began before it was asked
	// for, once: each of its batches is built after it, so the one that
	// catches up covers what the pool had when the follower resubscribed.
	// Through a later silence it stays open and may deliver a batch built
	// before; the snapshot the probe asks for then ends that one.
	catchesUp := f.staleAt(f.s.now())
	stream, err := kvpoolv1.NewKvPoolServiceClient(conn).SubscribePoolEvents(ctx, &kvpoolv1.SubscribePoolEventsRequest{Epoch: epoch, FromSequence: seq})
	if err != nil {
		return err
	}
	f.opened(conn, cancel, epoch == 0 && seq == 0)
	defer f.ended()
	for {
		msg, err := stream.Recv()
		if f.reloadAsked() {
			f.resync = true
			return errResubscribe
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled {
				return ctx.Err()
			}
			return err
		}
		b := msg.GetBatch()
		if cleared, err := f.apply(b); err != nil {
			return err
		} else if cleared {
			f.gaps.Inc()
			f.resync = true
			return errResubscribe
		}
		// Applied without a gap from where the index was (or from a
		// snapshot). A sign of life; and, once the batch reaches the pool's
		// last event, caught up, whatever the stream missed while down.
		// Before that (a backlog of several batches) the index is behind
		// the pool, and a stale pool stays stale.
		if catchesUp && caughtUp(b) {
			f.fresh.Resynced(f.addr, f.s.now())
			catchesUp = false
		} else {
			f.fresh.Applied(f.addr, f.s.now())
		}
	}
}

// opened records the subscription for reload and the prober; fromZero: it
// asked for a snapshot.
func (f *poolFollower) opened(conn grpc.ClientConnInterface, cancel context.CancelFunc, fromZero bool) {
	f.mu.Lock()
	f.cancel, f.loading, f.reloaded = cancel, fromZero, false
	f.mu.Unlock()
	f.prober.subscribed(f.addr, conn)
}

func (f *poolFollower) ended() {
	f.mu.Lock()
	f.cancel, f.loading, f.reloaded = nil, false, false
	f.mu.Unlock()
	f.prober.ended(f.addr)
}

// reload is the prober's resync: the pool answered while stale, and an idle
// pool would send nothing to catch the index up (nor may a subscription
// open since before the silence: follow), so the subscription makes way for
// one that asks for a snapshot (unless it brings one already).
func (f *poolFollower) reload() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil && !f.loading {
		f.loading, f.reloaded = true, true
		f.cancel()
	}
}

func (f *poolFollower) reloadAsked() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reloaded
}

// loaded records that the subscription's snapshot is in: a later reload
// may end it.
func (f *poolFollower) loaded() {
	f.mu.Lock()
	f.loading = false
	f.mu.Unlock()
}

// apply applies one batch; it reports whether the pool index needs a
// snapshot (it cleared for a gap or a new epoch).
func (f *poolFollower) apply(b *kvpoolv1.PoolEventBatch) (bool, error) {
	if snap := b.GetSnapshot(); snap != nil {
		l, err := kvwire.PoolLayoutFromProto(snap.GetLayout())
		if err != nil {
			return false, err
		}
		if f.pix == nil || f.pix.Layout() != l {
			pix, err := flashindex.NewPoolIndex(l, f.s.cfg.PoolMaxObjects)
			if err != nil {
				return false, err
			}
			f.pix = pix
			f.s.ix.AttachPool(pix)
		}
		objs := make([]kvpool.Object, 0, len(snap.GetObjectKeys()))
		for _, k := range snap.GetObjectKeys() {
			o, err := l.ParseKey(k)
			if err != nil {
				return false, fmt.Errorf("pool snapshot: %w", err)
			}
			objs = append(objs, o)
		}
		if err := f.pix.Load(b.GetEpoch(), snap.GetSequence(), objs); err != nil {
			return false, err
		}
		f.snapshots.Inc()
		f.resync = false
		f.loaded()
	}
	if f.pix == nil {
		return false, errors.New("pool stream began without a snapshot")
	}
	l := f.pix.Layout()
	before := f.pix.Stats()
	evs := make([]kvpool.Event, 0, len(b.GetEvents()))
	for _, e := range b.GetEvents() {
		ev, err := kvwire.PoolEventFromProto(l, e)
		if err != nil {
			// Keep the sequence number: skipping it would read as a gap.
			f.badEvents.Inc()
			ev = kvpool.Event{Seq: e.GetSequence()}
		}
		evs = append(evs, ev)
	}
	f.events.Add(float64(len(evs)))
	cleared := f.pix.Apply(b.GetEpoch(), evs)
	if after := f.pix.Stats(); cleared && after.Gaps == before.Gaps && after.Epochs == before.Epochs {
		// Overflow alone: what was lost is what the bound refuses to hold,
		// which a snapshot would bring back only to overflow at the next
		// event (one snapshot per event while the pool stays full).
		f.gaps.Inc()
		f.s.log.Warn("shared pool holds more objects than the pool index may: it cleared and rebuilds from events",
			"pool_max_objects", f.s.cfg.PoolMaxObjects, "overflows", after.Overflows)
		return false, nil
	}
	return cleared, nil
}
