package scheduler

import (
	"context"

	"google.golang.org/grpc"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
)

// publish counts program events and hands them to every WatchPrograms
// subscriber. Callers hold s.mu, so subscribers see events in the order the
// core made them, and after the snapshot they were subscribed with.
func (s *Service) publish(evs []admission.Event) {
	if len(evs) == 0 {
		return
	}
	s.metrics.events(evs)
	if !s.programSubs.active() {
		return
	}
	out := make([]*schedulerv1.WatchProgramsResponse, len(evs))
	now := s.now()
	for i, e := range evs {
		out[i] = &schedulerv1.WatchProgramsResponse{Program: programToProto(e.Program, now), Reason: e.Reason,
			Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_CHANGED}
	}
	s.programSubs.publish(out...)
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
	now := s.now()
	for i, p := range ps {
		resp.Programs[i] = programToProto(p, now)
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
	return &schedulerv1.GetProgramResponse{Program: programToProto(p, s.now())}, nil
}

// WatchPrograms streams the program table: EXISTING for every program, a
// SYNCED marker, then every change (those whose reason the request names,
// when it names any, less those it excepts). The snapshot is taken under
// the same lock that orders changes, so none is missed or seen twice.
func (s *Service) WatchPrograms(req *schedulerv1.WatchProgramsRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchProgramsResponse]) error {
	wants, err := reasonFilter(req)
	if err != nil {
		return toStatus(err)
	}
	s.mu.Lock()
	table := s.ctrl.List(admission.Filter{})
	sub := s.programSubs.subscribe(wants)
	s.mu.Unlock()
	defer s.programSubs.unsubscribe(sub)
	now := s.now()
	for _, p := range table {
		if err := stream.Send(&schedulerv1.WatchProgramsResponse{Program: programToProto(p, now), Reason: "snapshot",
			Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING}); err != nil {
			return err
		}
	}
	if err := stream.Send(&schedulerv1.WatchProgramsResponse{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED}); err != nil {
		return err
	}
	return pump(stream.Context(), s.stop, sub, stream.Send)
}

// reasonFilter is the subscriber filter of a watch's reasons and
// except_reasons (nil: every change). It runs for every change, under the
// lock that routing holds, so it looks reasons up in sets built here once,
// never scanning the request's lists, whose length is bounded. A reason the
// scheduler does not publish is kept, and matches nothing: a newer watcher
// may name one an older scheduler has not heard of (a rolling upgrade).
func reasonFilter(req *schedulerv1.WatchProgramsRequest) (func(*schedulerv1.WatchProgramsResponse) bool, error) {
	only, err := reasonSet("reasons", req.GetReasons())
	if err != nil {
		return nil, err
	}
	except, err := reasonSet("except_reasons", req.GetExceptReasons())
	if err != nil {
		return nil, err
	}
	if only == nil && except == nil {
		return nil, nil
	}
	return func(e *schedulerv1.WatchProgramsResponse) bool {
		_, named := only[e.GetReason()]
		_, excepted := except[e.GetReason()]
		return (only == nil || named) && !excepted
	}, nil
}

// A watch names at most maxWatchReasons reasons in each list, each of at
// most maxReasonBytes: a few times the reasons admission has.
const (
	maxWatchReasons = 64
	maxReasonBytes  = 64
)

// reasonSet is the set of reasons, nil when there are none.
func reasonSet(field string, reasons []string) (map[string]struct{}, error) {
	if len(reasons) == 0 {
		return nil, nil
	}
	if len(reasons) > maxWatchReasons {
		return nil, invalid("%s: %d reasons; at most %d", field, len(reasons), maxWatchReasons)
	}
	set := make(map[string]struct{}, len(reasons))
	for _, r := range reasons {
		if len(r) > maxReasonBytes {
			return nil, invalid("%s: a reason of %d bytes; at most %d", field, len(r), maxReasonBytes)
		}
		set[r] = struct{}{}
	}
	return set, nil
}
