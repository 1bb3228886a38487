package flashindexer

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
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
type poolFollower struct {
	s    *Service
	addr string
	// pix is replaced when the pool's layout changes (a different pool).
	pix *flashindex.PoolIndex
	// resync asks the next subscription for a snapshot (after a clear).
	resync bool

	events, snapshots, gaps, badEvents prometheus.Counter
}

func newPoolFollower(s *Service, addr string, reg prometheus.Registerer, name func(string) string) (*poolFollower, error) {
	f := &poolFollower{s: s, addr: addr,
		events:    prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_events_total"), Help: "Shared-pool events applied to the pool index."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_snapshots_total"), Help: "Shared-pool snapshots loaded."}),
		gaps:      prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_clears_total"), Help: "Times the pool index cleared itself (sequence gap, new epoch, overflow)."}),
		badEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: name("pool_bad_events_total"), Help: "Shared-pool events with an unknown type or key, ignored."}),
	}
	if err := servicekit.RegisterMetrics(reg, f.events, f.snapshots, f.gaps, f.badEvents); err != nil {
		return nil, err
	}
	return f, nil
}

// run follows the pool until ctx is done.
func (f *poolFollower) run(ctx context.Context) {
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
	stream, err := kvpoolv1.NewKvPoolServiceClient(conn).SubscribePoolEvents(ctx, &kvpoolv1.SubscribePoolEventsRequest{Epoch: epoch, FromSequence: seq})
	if err != nil {
		return err
	}
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled {
				return ctx.Err()
			}
			return err
		}
		if cleared, err := f.apply(msg.GetBatch()); err != nil {
			return err
		} else if cleared {
			f.gaps.Inc()
			f.resync = true
			return errResubscribe
		}
	}
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
