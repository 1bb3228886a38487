package sessionindexer

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/services/servicekit"
)

// createdReasons are the reasons of a program's first event, the only one
// whose parent is new: a program's parent is set when admission creates it
// and never changes.
var createdReasons = []string{admission.ReasonAdmitted, admission.ReasonQueued}

// watchPrograms learns sub-agent parents from the program table, where
// admission keeps one (the route decisions bring them under every policy,
// but only as the sub-agent's turns are routed; the watch's snapshot has
// every running program's at each reconnect). Lineage needs nothing else
// from the table: placement shows in the KV events themselves. So it asks
// only for new programs, not every turn's phase changes.
func (s *Service) watchPrograms(ctx context.Context, conn *grpc.ClientConn) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	var once sync.Once
	// The stream starts with every program already running, so a reconnect
	// misses no parent.
	servicekit.Watch(ctx, s.cfg.Backoff,
		func(ctx context.Context) (grpc.ServerStreamingClient[schedulerv1.WatchProgramsResponse], error) {
			return client.WatchPrograms(ctx, &schedulerv1.WatchProgramsRequest{Reasons: createdReasons})
		},
		func(resp *schedulerv1.WatchProgramsResponse) bool {
			p := resp.GetProgram()
			s.setParent(agentctx.Scope(p.GetTenant(), p.GetSessionId()), agentctx.Scope(p.GetTenant(), p.GetParentSessionId()))
			return true
		},
		func(err error) { once.Do(func() { s.log.Warn("watch programs", "err", err) }) })
}

// setParent records a sub-agent's parent (nothing for a session without
// one).
func (s *Service) setParent(session, parent string) {
	if parent == "" {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idx.SetParent(session, parent, now)
}
