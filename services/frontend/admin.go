package frontend

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	"switchyard.dev/pkg/agentctx"
)

// admin implements the frontend admin gRPC service (and, through the
// gateway, its REST mapping).
type admin struct {
	frontendv1.UnimplementedFrontendAdminServiceServer
	s *Service
}

func (a *admin) ListSessions(_ context.Context, req *frontendv1.ListSessionsRequest) (*frontendv1.ListSessionsResponse, error) {
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	return &frontendv1.ListSessionsResponse{Sessions: a.s.sessions.list(req.GetTenant(), limit)}, nil
}

func (a *admin) GetSession(_ context.Context, req *frontendv1.GetSessionRequest) (*frontendv1.GetSessionResponse, error) {
	if err := agentctx.ValidateID(req.GetSessionId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "session_id: %v", err)
	}
	tenant := req.GetTenant()
	if tenant == "" {
		tenant = AnonymousTenant
	}
	sess := a.s.sessions.lookup(sessionKey(tenant, req.GetSessionId()))
	if sess == nil {
		return nil, status.Errorf(codes.NotFound, "session %q of tenant %q not seen by this frontend", req.GetSessionId(), tenant)
	}
	return &frontendv1.GetSessionResponse{Session: sess}, nil
}
