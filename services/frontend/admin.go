package frontend

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/services/servicekit"
)

// admin implements the frontend admin gRPC service (and, through the
// gateway, its REST mapping). Its session view is the fleet's: what every
// scheduler replica recorded of the turns it routed (fleet.go), the same
// through any frontend.
type admin struct {
	frontendv1.UnimplementedFrontendAdminServiceServer
	s *Service
}

// scope is the tenant an admin call may see ("" = all). An operator — the
// mesh's admin certificate, or an operator key (OperatorTenant) — sees the
// tenant it asks for, all when empty. A tenant's key, in x-api-key or
// "authorization: Bearer" metadata (the REST gateway forwards
// Authorization), sees only its own tenant: one tenant never lists or reads
// another's sessions. Without a key the admin API answers only where it is
// open: no keys configured and a loopback port (switchyard up).
func (a *admin) scope(ctx context.Context, asked string) (string, error) {
	if id, ok := servicekit.Caller(ctx); ok && id.Service == servicekit.AdminIdentity {
		return asked, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return a.s.adminTenant(first("x-api-key"), first("authorization"), asked)
}

// adminTenant is scope for a caller with these credentials (an x-api-key
// value, an Authorization value) that is not the mesh's admin: the admin
// API's rule, which the console (console.go) follows too.
func (s *Service) adminTenant(apiKey, authorization, asked string) (string, error) {
	t, ok := s.tenantForKey(apiKey, authorization)
	switch {
	case ok && t == OperatorTenant:
		return asked, nil
	case !ok && s.adminOpen:
		return asked, nil
	case !ok:
		return "", status.Error(codes.Unauthenticated, "the admin API needs an API key (a tenant's, or an operator's: tenant \"*\" in --api-keys-file)")
	case asked != "" && asked != t:
		return "", status.Errorf(codes.PermissionDenied, "the API key is scoped to tenant %q, and the request asked for tenant %q", t, asked)
	}
	return t, nil
}

func (a *admin) ListSessions(ctx context.Context, req *frontendv1.ListSessionsRequest) (*frontendv1.ListSessionsResponse, error) {
	tenant, err := a.scope(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	limit := req.GetLimit()
	if limit == 0 {
		limit = 100
	}
	v, err := a.s.fleetSessions(ctx, &schedulerv1.ListSessionsRequest{Tenant: tenant, Limit: limit})
	if err != nil {
		return nil, err
	}
	return &frontendv1.ListSessionsResponse{Sessions: v.sessions, SchedulersMissing: v.missing, Totals: v.totals}, nil
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
	v, err := a.s.fleetSessions(ctx, &schedulerv1.ListSessionsRequest{Tenant: tenant, SessionId: req.GetSessionId(), Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(v.sessions) == 0 {
		if missing := v.missing; missing > 0 {
			return nil, status.Errorf(codes.NotFound, "session %q of tenant %q: no answering scheduler replica has a turn of it (%d did not answer)", req.GetSessionId(), tenant, missing)
		}
		return nil, status.Errorf(codes.NotFound, "session %q of tenant %q: no scheduler replica has a turn of it", req.GetSessionId(), tenant)
	}
	return &frontendv1.GetSessionResponse{Session: v.sessions[0], SchedulersMissing: v.missing}, nil
}

// registerAdminGateway registers the admin API's REST mapping
// (proto/gateway.yaml) on the gateway, and before it GetSession for a
// session id that holds '/' (tenant-scoped ids, "acme/s@7"; an agent names
// its sessions as it likes): a client escapes it (encodeURIComponent:
// "acme%2Fs%407"), and servicekit.HandleIDWithSlashes takes the rest of the
// path as the id.
func registerAdminGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	client := frontendv1.NewFrontendAdminServiceClient(conn)
	err := servicekit.HandleIDWithSlashes(mux, "/v1/admin/sessions/{session_id=**}", "session_id", frontendv1.FrontendAdminService_GetSession_FullMethodName,
		func(id string) *frontendv1.GetSessionRequest { return &frontendv1.GetSessionRequest{SessionId: id} }, client.GetSession)
	if err != nil {
		return err
	}
	return frontendv1.RegisterFrontendAdminServiceHandler(ctx, mux, conn)
}
