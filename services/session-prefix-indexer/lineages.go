package sessionindexer

import (
	"context"
	"fmt"

	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	"switchyard.dev/pkg/sessionindex"
	"switchyard.dev/services/servicekit/kvwire"
)

// MaxLineageQueries bounds one GetSessionLineages call.
const MaxLineageQueries = 4096

// GetSessionLineages answers many lineage queries under one lock: the hint
// emitter's read for a decision round. A session the index does not know is
// answered found=false, not an error; a query without a session id fails
// the call, and so does any query before the index has caught up
// (UNAVAILABLE).
func (s *Service) GetSessionLineages(_ context.Context, req *sessionindexv1.GetSessionLineagesRequest) (*sessionindexv1.GetSessionLineagesResponse, error) {
	qs := req.GetQueries()
	if len(qs) > MaxLineageQueries {
		return nil, rpcError(fmt.Errorf("%w: %d, at most %d", errTooManyQueries, len(qs), MaxLineageQueries))
	}
	for _, q := range qs {
		if q.GetSessionId() == "" {
			return nil, rpcError(errBadRequest)
		}
	}
	if err := s.caughtUp(); err != nil {
		return nil, err
	}
	resp := &sessionindexv1.GetSessionLineagesResponse{Results: make([]*sessionindexv1.SessionLineage, len(qs))}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range qs {
		r := &sessionindexv1.SessionLineage{SessionId: q.GetSessionId()}
		if sum, ok := s.idx.Session(q.GetSessionId()); ok {
			r.Found, r.ParentSessionId = true, sum.Parent
			for _, c := range s.idx.Lineage(q.GetSessionId(), q.GetWorkerId()) {
				r.Lineages = append(r.Lineages, lineageToProto(c))
			}
		}
		resp.Results[i] = r
	}
	return resp, nil
}

// lineageToProto carries a chain with its shared count.
func lineageToProto(c sessionindex.Chain) *sessionindexv1.Lineage {
	return &sessionindexv1.Lineage{WorkerId: c.Worker, BlockHashes: kvwire.Uint64s(c.Blocks), SharedBlocks: uint32(c.Shared)}
}
