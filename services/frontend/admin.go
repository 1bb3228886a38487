package frontend

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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

// scope is the tenant an admin call may see. In anonymous mode, the one it
// asks for (all when empty). With API keys configured, only the caller's:
// its key, in x-api-key or "authorization: Bearer" metadata (the REST
// gateway forwards Authorization), names the tenant, so one tenant can never
// list or read another's sessions on the public port.
func (a *admin) scope(ctx context.Context, asked string) (string, error) {
	if len(a.s.cfg.APIKeys) == 0 {
		return asked, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	t, ok := a.s.tenantForKey(first("x-api-key"), first("authorization"))
	switch {
	case !ok:
		return "", status.Error(codes.Unauthenticated, "missing or invalid API key")
	case asked != "" && asked != t:
		return "", status.Errorf(codes.PermissionDenied, "the API key is not tenant %q's", asked)
	}
	return t, nil
}

func (a *admin) ListSessions(ctx context.Context, req *frontendv1.ListSessionsRequest) (*frontendv1.ListSessionsResponse, error) {
	tenant, err := a.scope(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	return &frontendv1.ListSessionsResponse{Sessions: a.s.sessions.list(tenant, limit)}, nil
}

func (a *admin) GetSession(ctx context.Context, req *frontendv1.GetSessionRequest) (*frontendv1.GetSessionResponse, error) {
	if err := agentctx.ValidateID(req.GetSessionId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "session_id: %v", err)
	}
	tenant, err := a.scope(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	if tenant == "" {
		tenant = AnonymousTenant
	}
	sess := a.s.sessions.lookup(sessionKey(tenant, req.GetSessionId()))
	if sess == nil {
		return nil, status.Errorf(codes.NotFound, "session %q of tenant %q not seen by this frontend", req.GetSessionId(), tenant)
	}
	return &frontendv1.GetSessionResponse{Session: sess}, nil
}
