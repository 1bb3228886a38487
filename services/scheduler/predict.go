package scheduler

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// predictRoute tells the flash indexer that worker is about to hold the
// routed prompt's blocks (predict-on-route, --predict-on-route-ttl): until
// the worker's own KV events arrive, sibling requests of a burst see the
// overlap and follow. It is sent before Route answers, as a notice each
// indexer applies before the next call on this scheduler's stream to it, so
// a sibling this scheduler routes after this one already sees it. A failure
// only costs that hint (the indexer logs it). Only the
// blocks past held, the worker's real device prefix, are sent: a warm agent
// turn's prompt crosses this hop as its few new blocks, not again whole.
func (s *Service) predictRoute(ctx context.Context, req *schedulerv1.RouteRequest, worker string, rank uint32, held int) {
	if held >= len(req.GetBlockHashes()) {
		return // nothing the worker does not hold already
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.FindMatchesTimeout)
	defer cancel()
	if err := s.index.predictRoute(pctx, &flashindexv1.PredictRouteRequest{
		RequestId:   req.GetRequestId(),
		WorkerId:    worker,
		DpRank:      rank,
		BlockHashes: req.GetBlockHashes()[held:],
		FirstBlock:  uint32(held),
		Ttl:         durationpb.New(s.cfg.PredictOnRouteTTL),
	}); err != nil {
		s.log.WarnContext(ctx, "PredictRoute failed", "request_id", req.GetRequestId(), "worker", worker, "err", err)
	}
}
