package kvhintemitter

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// watchWorkers keeps a shim connection and the latest KV usage per live
// worker, re-watching the scheduler with backoff when the stream breaks.
func (s *Service) watchWorkers(ctx context.Context, conn *grpc.ClientConn) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	var seen map[string]bool // workers this stream announced
	servicekit.Watch(ctx, s.cfg.Backoff,
		func(ctx context.Context) (grpc.ServerStreamingClient[schedulerv1.WatchWorkersResponse], error) {
			seen = map[string]bool{}
			return client.WatchWorkers(ctx, &schedulerv1.WatchWorkersRequest{})
		},
		func(ev *schedulerv1.WatchWorkersResponse) bool {
			switch ev.GetType() {
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED:
				seen[ev.GetWorker().GetWorkerId()] = true
				s.upsertWorker(ev.GetWorker())
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED:
				s.removeWorker(ctx, ev.GetWorker().GetWorkerId())
			case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED:
				// Workers we knew that were not re-announced are gone.
				s.wmu.Lock()
				var stale []string
				for id := range s.workers {
					if !seen[id] {
						stale = append(stale, id)
					}
				}
				s.wmu.Unlock()
				for _, id := range stale {
					s.removeWorker(ctx, id)
				}
			}
			return true
		},
		func(err error) { s.log.Warn("watch workers", "scheduler", s.cfg.SchedulerAddr, "err", err) })
}

func (s *Service) upsertWorker(w *workerv1.Worker) {
	id, addr := w.GetWorkerId(), w.GetAddress()
	if id == "" || addr == "" {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	wk := s.workers[id]
	if wk == nil || wk.addr != addr {
		conn, err := s.dial(addr)
		if err != nil {
			s.log.Error("dial shim", "worker", id, "addr", addr, "err", err)
			return
		}
		if wk != nil {
			wk.conn.Close()
		}
		wk = &worker{addr: addr, conn: conn, client: enginev1.NewEngineShimServiceClient(conn)}
		s.workers[id] = wk
	}
	wk.support = kvwire.HintSupport(w.GetHintSupport())
	// Pressure is what running requests hold, not what the prefix cache
	// keeps (a warm cache is always full).
	if l := w.GetLoad(); l.GetTotalKvBlocks() > 0 {
		wk.usage, wk.known = float64(l.GetActiveKvBlocks())/float64(l.GetTotalKvBlocks()), true
	}
}

func (s *Service) removeWorker(ctx context.Context, id string) {
	s.wmu.Lock()
	wk := s.workers[id]
	delete(s.workers, id)
	s.wmu.Unlock()
	if wk == nil {
		return
	}
	wk.conn.Close()
	select {
	case s.removed <- id:
	case <-ctx.Done():
	}
}

func (s *Service) closeWorkers() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for id, wk := range s.workers {
		wk.conn.Close()
		delete(s.workers, id)
	}
}

// programFeed is one message from a program watch to the engine loop: a
// program's state, or (live set) the end of the scheduler's snapshot.
// source is which scheduler replica's watch it came from: each owns its own
// programs, so one replica's snapshot forgets only programs last heard from
// it.
type programFeed struct {
	program hints.Program
	live    map[string]bool // every session of the snapshot; nil for a program
	source  int
}

// watchPrograms feeds the program table to the engine loop: the scheduler's
// snapshot (EXISTING events, then SYNCED, after which programs the loop knew
// but the snapshot lacks are forgotten), then every change.
func (s *Service) watchPrograms(ctx context.Context, conn *grpc.ClientConn, source int, addr string) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	feed := func(f programFeed) bool {
		select {
		case s.programs <- f:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var live map[string]bool // sessions of this stream's snapshot
	// The changes no enabled policy needs (every turn's phase changes,
	// unless a policy follows them) are not asked for; a scheduler that
	// predates except_reasons sends them anyway, and they are dropped here.
	unwatched := s.cfg.Hints.Unwatched()
	// A scheduler not heard from for ForgetAfter (gone for good, or
	// unreachable) has its programs forgotten, as an empty snapshot from it
	// would: while a turn's changes are unwatched, an active program's
	// silence says nothing, so the engine keeps it until its end or its
	// scheduler's snapshot says otherwise.
	var downSince time.Time
	forgotten := false
	servicekit.Watch(ctx, s.cfg.Backoff,
		func(ctx context.Context) (grpc.ServerStreamingClient[schedulerv1.WatchProgramsResponse], error) {
			live = map[string]bool{}
			return client.WatchPrograms(ctx, &schedulerv1.WatchProgramsRequest{ExceptReasons: unwatched})
		},
		func(resp *schedulerv1.WatchProgramsResponse) bool {
			downSince, forgotten = time.Time{}, false
			if resp.GetType() == schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_CHANGED && slices.Contains(unwatched, resp.GetReason()) {
				return true
			}
			f := programFeed{program: programFromProto(resp.GetProgram()), source: source}
			switch resp.GetType() {
			case schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING:
				live[agentctx.Scope(resp.GetProgram().GetTenant(), resp.GetProgram().GetSessionId())] = true
			case schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED:
				f = programFeed{live: live, source: source}
			}
			return feed(f)
		},
		func(err error) {
			s.log.Warn("watch programs", "scheduler", addr, "err", err)
			now := s.now()
			if downSince.IsZero() {
				downSince = now
			}
			if !forgotten && now.Sub(downSince) > s.cfg.Hints.Forgetting() {
				s.log.Warn("forgetting the programs of a scheduler not heard from", "scheduler", addr, "for", now.Sub(downSince))
				forgotten = feed(programFeed{live: map[string]bool{}, source: source})
			}
		})
}
