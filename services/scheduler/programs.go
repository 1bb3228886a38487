package scheduler

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
)

// watcherBuffer is how many events a WatchPrograms client may fall behind
// before it is cut off: the admission core must never wait for a reader.
const watcherBuffer = 4096

type programWatcher struct {
	events chan *schedulerv1.WatchProgramsResponse
	lagged chan struct{} // closed when the buffer overflowed
}

// publish counts program events and hands them to every watcher. Callers
// hold s.mu, so watchers see events in the order the core made them.
func (s *Service) publish(evs []admission.Event) {
	if len(evs) == 0 {
		return
	}
	s.metrics.events(evs)
	for w := range s.watchers {
		for _, e := range evs {
			select {
			case w.events <- &schedulerv1.WatchProgramsResponse{Program: programToProto(e.Program), Reason: e.Reason}:
			default:
				delete(s.watchers, w)
				close(w.lagged)
				s.metrics.watchersDropped.Inc()
			}
			if _, ok := s.watchers[w]; !ok {
				break
			}
		}
	}
}

// ListPrograms lists programs, optionally filtered by worker, lifecycle and
// tenant.
func (s *Service) ListPrograms(ctx context.Context, req *schedulerv1.ListProgramsRequest) (*schedulerv1.ListProgramsResponse, error) {
	f := admission.Filter{Worker: req.GetWorkerId(), Tenant: req.GetTenant()}
	if l := req.GetLifecycle(); l != schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_UNSPECIFIED {
		if f.Lifecycle = lifecycleFromProto(l); f.Lifecycle == 0 {
			return nil, toStatus(invalid("unknown lifecycle %v", l))
		}
	}
	s.mu.Lock()
	ps := s.ctrl.List(f)
	s.mu.Unlock()
	resp := &schedulerv1.ListProgramsResponse{Programs: make([]*schedulerv1.Program, len(ps))}
	for i, p := range ps {
		resp.Programs[i] = programToProto(p)
	}
	return resp, nil
}

// GetProgram returns one program.
func (s *Service) GetProgram(ctx context.Context, req *schedulerv1.GetProgramRequest) (*schedulerv1.GetProgramResponse, error) {
	if req.GetSessionId() == "" {
		return nil, toStatus(invalid("session_id is required"))
	}
	s.mu.Lock()
	p, ok := s.ctrl.Get(admission.Key{Tenant: req.GetTenant(), SessionID: req.GetSessionId()})
	s.mu.Unlock()
	if !ok {
		return nil, toStatus(admission.ErrUnknownProgram)
	}
	return &schedulerv1.GetProgramResponse{Program: programToProto(p)}, nil
}

// WatchPrograms streams every program change from now on. Use ListPrograms
// for the current state.
func (s *Service) WatchPrograms(_ *schedulerv1.WatchProgramsRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchProgramsResponse]) error {
	w := &programWatcher{events: make(chan *schedulerv1.WatchProgramsResponse, watcherBuffer), lagged: make(chan struct{})}
	s.mu.Lock()
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	}()
	// Headers go out now, so the client knows it is subscribed.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		select {
		case ev := <-w.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-w.lagged:
			return status.Error(codes.ResourceExhausted, "watcher fell too far behind; list and watch again")
		case <-stream.Context().Done():
			return toStatus(stream.Context().Err())
		case <-s.stop:
			return toStatus(errShutdown)
		}
	}
}
