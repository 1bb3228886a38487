package scheduler

import (
	"context"
	"time"

	memdb "github.com/hashicorp/go-memdb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/registry"
)

// RegisterWorker adds or replaces a worker and grants it a lease.
func (s *Service) RegisterWorker(ctx context.Context, req *schedulerv1.RegisterWorkerRequest) (*schedulerv1.RegisterWorkerResponse, error) {
	if req.GetWorker() == nil {
		return nil, toStatus(invalid("worker is required"))
	}
	w := workerFromProto(req.GetWorker())
	changed, err := s.reg.Register(s.now(), w)
	if err != nil {
		return nil, toStatus(err)
	}
	s.mu.Lock()
	s.setWorkerLocked(w)
	s.mu.Unlock()
	s.metrics.workers.Set(float64(s.reg.Len()))
	if changed {
		s.log.Info("worker registered", "worker_id", w.ID, "address", w.Address, "epoch", w.Epoch,
			"kv_capacity_tokens", w.Capacity.KVCapacityTokens, "max_running", w.Capacity.MaxRunning)
	}
	return &schedulerv1.RegisterWorkerResponse{LeaseTtl: durationOrZero(s.reg.LeaseTTL())}, nil
}

// setWorkerLocked gives routing and admission a registered worker's
// capacity; s.mu is held.
func (s *Service) setWorkerLocked(w registry.Worker) {
	tiers := w.Capacity.TierTokens()
	s.pipe.SetWorker(w.ID, tiers[:], w.Capacity.MaxRunning)
	// Registration carries a load too, sampled as it was sent (its age is
	// not said): the turns that finished while it was on its way stay
	// taken out of it.
	s.pipe.ReportedAt(w.ID, s.sampledAt(s.now(), nil))
}

// Heartbeat renews a lease; NOT_FOUND tells the shim to register again.
func (s *Service) Heartbeat(ctx context.Context, req *schedulerv1.HeartbeatRequest) (*schedulerv1.HeartbeatResponse, error) {
	if req.GetWorkerId() == "" {
		return nil, toStatus(invalid("worker_id is required"))
	}
	now := s.now()
	if err := s.reg.Heartbeat(now, req.GetWorkerId(), loadFromProto(req.GetLoad())); err != nil {
		return nil, toStatus(err)
	}
	// The new load leaves out the requests finished before it was sampled;
	// the turns it names as running long are not stale (their finish is
	// not lost).
	s.mu.Lock()
	s.pipe.ReportedAt(req.GetWorkerId(), s.sampledAt(now, req.GetLoadAge()))
	s.pipe.Running(now, req.GetWorkerId(), req.GetLongRunningRequestIds())
	s.mu.Unlock()
	return &schedulerv1.HeartbeatResponse{LeaseTtl: durationOrZero(s.reg.LeaseTTL())}, nil
}

// sampledAt is when a heartbeat that arrived at now sampled its load, which
// was age old when sent (at most a lease: a worker's own clock says it),
// allowing Config.HeartbeatTransit for the trip.
func (s *Service) sampledAt(now time.Time, age *durationpb.Duration) time.Time {
	a := min(max(age.AsDuration(), 0), s.reg.LeaseTTL())
	return now.Add(-a - s.cfg.HeartbeatTransit)
}

// DeregisterWorker removes a worker at once.
func (s *Service) DeregisterWorker(ctx context.Context, req *schedulerv1.DeregisterWorkerRequest) (*schedulerv1.DeregisterWorkerResponse, error) {
	if req.GetWorkerId() == "" {
		return nil, toStatus(invalid("worker_id is required"))
	}
	w, err := s.reg.Deregister(req.GetWorkerId())
	if err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("worker deregistered", "worker_id", w.ID)
	s.forgetWorker(w.ID)
	return &schedulerv1.DeregisterWorkerResponse{}, nil
}

// ListWorkers returns every live worker with its load.
func (s *Service) ListWorkers(ctx context.Context, _ *schedulerv1.ListWorkersRequest) (*schedulerv1.ListWorkersResponse, error) {
	ws, err := s.reg.List(nil)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &schedulerv1.ListWorkersResponse{LeaseTtl: durationpb.New(s.cfg.LeaseTTL)}
	for _, w := range ws {
		resp.Workers = append(resp.Workers, workerToProto(w))
	}
	return resp, nil
}

// WatchWorkers streams the worker set: ADDED for each live worker, SYNCED,
// then every membership change. It wakes on the registry's memdb watch set
// (membership only: heartbeats do not wake it) and diffs snapshots.
func (s *Service) WatchWorkers(_ *schedulerv1.WatchWorkersRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchWorkersResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var prev []registry.Worker
	for first := true; ; first = false {
		ws := memdb.NewWatchSet()
		cur, err := s.reg.Members(ws)
		if err != nil {
			return toStatus(err)
		}
		for _, c := range registry.Diff(prev, cur) {
			if err := stream.Send(&schedulerv1.WatchWorkersResponse{Type: changeTypes[c.Type], Worker: s.withLoad(c.Worker)}); err != nil {
				return err
			}
		}
		if first {
			if err := stream.Send(&schedulerv1.WatchWorkersResponse{Type: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_SYNCED}); err != nil {
				return err
			}
		}
		prev = cur
		if err := ws.WatchCtx(ctx); err != nil {
			select {
			case <-s.stop:
				return toStatus(errShutdown)
			default:
			}
			return toStatus(ctx.Err())
		}
	}
}

var changeTypes = map[registry.ChangeType]schedulerv1.WorkerEventType{
	registry.Added:   schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED,
	registry.Updated: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED,
	registry.Removed: schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED,
}

// withLoad fills in the latest load and lease of a member, when it is still
// registered.
func (s *Service) withLoad(w registry.Worker) *workerv1.Worker {
	if cur, ok := s.reg.Get(w.ID); ok && cur.Epoch == w.Epoch && cur.Address == w.Address {
		return workerToProto(cur)
	}
	return workerToProto(w)
}
