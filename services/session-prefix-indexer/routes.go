package sessionindexer

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit"
)

// match is a route decision's prefix hit waiting for the worker's KV events
// to make its block resident here.
type match struct {
	session string
	block   kv.BlockHash
	at      time.Time
}

// watchRoutes records the scheduler's route decisions: the session's prompt
// matched a prefix on the chosen worker. The stream is lossy (a lagging
// watcher is cut off), which costs lineage nothing that the KV events do not
// also bring, so it is simply watched again.
func (s *Service) watchRoutes(ctx context.Context, conn *grpc.ClientConn) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	var once sync.Once
	servicekit.Watch(ctx, s.cfg.Backoff,
		func(ctx context.Context) (grpc.ServerStreamingClient[schedulerv1.WatchRouteDecisionsResponse], error) {
			return client.WatchRouteDecisions(ctx, &schedulerv1.WatchRouteDecisionsRequest{})
		},
		func(resp *schedulerv1.WatchRouteDecisionsResponse) bool { s.routed(resp.GetDecision()); return true },
		func(err error) { once.Do(func() { s.log.Warn("watch route decisions", "err", err) }) })
}

// routed records a sub-agent's parent, and applies a decision's hit or
// keeps it until the worker's events catch up with the flash indexer's
// (whose answer the decision carries). Every policy routes, while only
// admission's policies keep programs, so the decision is where the parent
// of a sub-agent is always heard.
func (s *Service) routed(d *schedulerv1.RouteDecision) {
	session := agentctx.Scope(d.GetTenant(), d.GetSessionId())
	s.setParent(session, agentctx.Scope(d.GetTenant(), d.GetParentSessionId()))
	if session == "" || d.GetWorkerId() == "" || d.GetMatchedBlockHash() == 0 {
		return
	}
	m := match{session: session, block: kv.BlockHash(d.GetMatchedBlockHash()), at: s.now()}
	worker := d.GetWorkerId()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx.ApplyMatch(m.session, worker, m.block, m.at) {
		s.m.matches.WithLabelValues("applied").Inc()
		return
	}
	q := append(s.pending[worker], m)
	if len(q) > s.cfg.MatchBacklog {
		s.m.matches.WithLabelValues("dropped").Add(float64(len(q) - s.cfg.MatchBacklog))
		q = q[len(q)-s.cfg.MatchBacklog:]
	}
	s.pending[worker] = q
}

// retryMatches applies the waiting hits of worker that its latest events
// made resident and drops those older than MatchWait. Callers hold s.mu.
// Age is checked first: a worker silent for long (a restart, a partition)
// comes back with its shared prefixes resident again, and a hit from then
// would be applied as the session's lineage now.
func (s *Service) retryMatches(worker string, now time.Time) {
	q := s.pending[worker]
	if len(q) == 0 {
		return
	}
	kept := q[:0]
	for _, m := range q {
		switch {
		case now.Sub(m.at) > s.cfg.MatchWait:
			s.m.matches.WithLabelValues("expired").Inc()
		case s.idx.ApplyMatch(m.session, worker, m.block, now):
			s.m.matches.WithLabelValues("applied_late").Inc()
		default:
			kept = append(kept, m)
		}
	}
	clear(q[len(kept):])
	if len(kept) == 0 {
		delete(s.pending, worker)
		return
	}
	s.pending[worker] = kept
}
