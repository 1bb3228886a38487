package sessionindexer

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit"
)

// subscription follows one worker's KV events in its own goroutine.
type subscription struct {
	addr   string
	epoch  uint64 // as the scheduler announced it
	cancel context.CancelFunc
	done   chan struct{}
}

// watchWorkers keeps one subscription per live worker, re-watching the
// scheduler with backoff whenever the stream breaks. Returns when ctx ends,
// after every subscription has stopped.
func (s *Service) watchWorkers(ctx context.Context, conn *grpc.ClientConn) {
	subs := map[string]*subscription{}
	stop := func(id string) {
		sub := subs[id]
		sub.cancel()
		<-sub.done
		delete(subs, id)
		s.m.workers.Set(float64(len(subs)))
	}
	defer func() {
		for id := range subs {
			stop(id)
		}
	}()
	start := func(id, addr string, epoch uint64) {
		sctx, cancel := context.WithCancel(ctx)
		sub := &subscription{addr: addr, epoch: epoch, cancel: cancel, done: make(chan struct{})}
		subs[id] = sub
		s.m.workers.Set(float64(len(subs)))
		go func() {
			defer close(sub.done)
			s.follow(sctx, id, addr)
		}()
	}
	client := schedulerv1.NewSchedulerServiceClient(conn)
	bo := servicekit.Backoff{Min: s.cfg.BackoffMin, Max: s.cfg.BackoffMax}
	for ctx.Err() == nil {
		stream, err := client.WatchWorkers(ctx, &schedulerv1.WatchWorkersRequest{})
		if err != nil {
			s.log.Warn("watch workers", "scheduler", s.cfg.SchedulerAddr, "err", err)
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		// Workers announced before SYNCED make up the live set; any other
		// we follow left while we were not watching.
		seen := map[string]bool{}
		synced := false
		for {
			ev, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("worker watch ended", "err", err)
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
				// A new address or epoch is a restarted shim: start over
				// from its snapshot rather than wait for its stream to
				// reach our old sequence.
				if sub, ok := subs[id]; ok && sub.addr == w.GetAddress() && sub.epoch == w.GetEpoch() {
					continue
				} else if ok {
					stop(id)
				}
				start(id, w.GetAddress(), w.GetEpoch())
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED:
				if _, ok := subs[id]; ok {
					stop(id)
				}
				s.clearWorker(id)
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED:
				if synced {
					continue
				}
				synced = true
				for id := range subs {
					if !seen[id] {
						stop(id)
						s.clearWorker(id)
					}
				}
			}
		}
		if !bo.Wait(ctx) {
			return
		}
	}
}

// follow subscribes to one worker until ctx ends: snapshot, then events
// from the snapshot's sequence on; a gap, a new epoch or a sequence the shim
// no longer buffers reloads the snapshot. A broken stream resumes where it
// stopped, after a backoff.
func (s *Service) follow(ctx context.Context, worker, addr string) {
	conn, err := s.dial(addr)
	if err != nil {
		s.log.Error("dial shim", "worker", worker, "addr", addr, "err", err)
		return
	}
	defer conn.Close()
	client := enginev1.NewEngineShimServiceClient(conn)
	bo := servicekit.Backoff{Min: s.cfg.BackoffMin, Max: s.cfg.BackoffMax}
	var (
		synced bool
		epoch  uint64
		last   uint64
	)
	resync := func(reason string) bool {
		snap, err := client.GetKvSnapshot(ctx, &enginev1.GetKvSnapshotRequest{})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("kv snapshot", "worker", worker, "err", err)
			}
			return false
		}
		events := make([]kv.Event, 0, len(snap.GetEvents()))
		for _, e := range snap.GetEvents() {
			if ev, ok := eventFromProto(e); ok {
				events = append(events, ev)
			}
		}
		s.resync(worker, events)
		s.m.resyncs.WithLabelValues(reason).Inc()
		epoch, last, synced = snap.GetEpoch(), snap.GetSequence(), true
		return true
	}
	reason := "start"
	for ctx.Err() == nil {
		if !synced && !resync(reason) {
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		before := last
		err := s.stream(ctx, client, worker, &epoch, &last)
		if last != before {
			bo.Reset() // progress: the next hiccup waits only briefly
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errResync):
			synced, reason = false, "gap"
		case status.Code(err) == codes.OutOfRange:
			synced, reason = false, "out_of_range"
		default:
			s.log.Warn("kv event stream", "worker", worker, "err", err)
			// The shim may have restarted, and a restarted shim would only
			// show its new epoch once its sequence passed ours: reload.
			synced, reason = false, "reconnect"
		}
		if !bo.Wait(ctx) {
			return
		}
	}
}

var errResync = errors.New("sequence gap or new epoch")

// stream consumes batches after *last until an error; errResync when the
// batches no longer continue the state the index holds.
func (s *Service) stream(ctx context.Context, client enginev1.EngineShimServiceClient, worker string, epoch, last *uint64) error {
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
		case b.GetEpoch() != *epoch:
			return errResync
		case b.GetSequence() <= *last:
			continue // already applied (replayed overlap)
		case b.GetSequence() != *last+1:
			return errResync
		}
		events := make([]kv.Event, 0, len(b.GetEvents()))
		for _, e := range b.GetEvents() {
			if ev, ok := eventFromProto(e); ok {
				events = append(events, ev)
			}
		}
		s.apply(worker, events)
		s.m.batches.Inc()
		*last = b.GetSequence()
	}
}

// watchPrograms learns sub-agent parents. Lineage needs nothing else from
// the program table: placement shows in the KV events themselves.
func (s *Service) watchPrograms(ctx context.Context, conn *grpc.ClientConn) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	bo := servicekit.Backoff{Min: s.cfg.BackoffMin, Max: s.cfg.BackoffMax}
	var once sync.Once
	for ctx.Err() == nil {
		// Programs already running when we (re)connect come from the list.
		if list, err := client.ListPrograms(ctx, &schedulerv1.ListProgramsRequest{}); err == nil {
			for _, p := range list.GetPrograms() {
				s.setParent(p)
			}
		}
		stream, err := client.WatchPrograms(ctx, &schedulerv1.WatchProgramsRequest{})
		if err == nil {
			for {
				resp, err := stream.Recv()
				if err != nil {
					break
				}
				bo.Reset()
				s.setParent(resp.GetProgram())
			}
		} else {
			once.Do(func() { s.log.Warn("watch programs", "err", err) })
		}
		if !bo.Wait(ctx) {
			return
		}
	}
}

func (s *Service) setParent(p *schedulerv1.Program) {
	if p.GetParentSessionId() == "" {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idx.SetParent(p.GetSessionId(), p.GetParentSessionId(), now)
}
