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
	bo := servicekit.Backoff{Min: s.cfg.BackoffMin, Max: s.cfg.BackoffMax}
	var once sync.Once
	for ctx.Err() == nil {
		// The stream starts with every program already running, so a
		// reconnect misses no parent.
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
