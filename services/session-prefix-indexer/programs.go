package sessionindexer

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit"
)

// watchPrograms learns sub-agent parents. Lineage needs nothing else from
// the program table: placement shows in the KV events themselves.
func (s *Service) watchPrograms(ctx context.Context, conn *grpc.ClientConn) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	var once sync.Once
	// The stream starts with every program already running, so a reconnect
	// misses no parent.
	servicekit.Watch(ctx, s.cfg.Backoff,
		func(ctx context.Context) (grpc.ServerStreamingClient[schedulerv1.WatchProgramsResponse], error) {
			return client.WatchPrograms(ctx, &schedulerv1.WatchProgramsRequest{})
		},
		func(resp *schedulerv1.WatchProgramsResponse) bool { s.setParent(resp.GetProgram()); return true },
		func(err error) { once.Do(func() { s.log.Warn("watch programs", "err", err) }) })
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
