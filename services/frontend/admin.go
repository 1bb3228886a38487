package frontend

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
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

// sessionPath is GetSession's REST route for any session id, '/' and all.
const sessionPath = "/v1/admin/sessions/{session_id=**}"

// sessionIDFromPath keeps a query's session_id from replacing the path's.
var sessionIDFromPath = utilities.NewDoubleArray([][]string{{"session_id"}})

// registerAdminGateway registers the admin API's REST mapping
// (proto/gateway.yaml) on the gateway, and beside it GetSession for a
// session id that holds '/' (tenant-scoped ids, "acme/s@7"; an agent names
// its sessions as it likes). The mapping's /v1/admin/sessions/{session_id}
// is one path segment, and the gateway splits the path on every '/' once
// it is unescaped, "%2F" included, so such an id matched no route at all.
// sessionPath takes the rest of the path as the id: a client escapes it
// (encodeURIComponent: "acme%2Fs%407") and the call is the same
// GetSession, over conn, through the same interceptors. It is registered
// before the mapping because the gateway tries the latest registration
// first: the mapping's routes keep /v1/admin/sessions (which "**" would
// take as an empty id) and every id without '/'.
func registerAdminGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	client := frontendv1.NewFrontendAdminServiceClient(conn)
	err := mux.HandlePath(http.MethodGet, sessionPath, func(w http.ResponseWriter, r *http.Request, path map[string]string) {
		_, out := runtime.MarshalerForRequest(mux, r)
		ctx, err := runtime.AnnotateContext(r.Context(), mux, r, frontendv1.FrontendAdminService_GetSession_FullMethodName,
			runtime.WithHTTPPathPattern(sessionPath))
		if err != nil {
			runtime.HTTPError(r.Context(), mux, out, w, r, err)
			return
		}
		req := &frontendv1.GetSessionRequest{SessionId: path["session_id"]}
		if err := r.ParseForm(); err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		if err := runtime.PopulateQueryParameters(req, r.Form, sessionIDFromPath); err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		var md runtime.ServerMetadata
		resp, err := client.GetSession(ctx, req, grpc.Header(&md.HeaderMD), grpc.Trailer(&md.TrailerMD))
		ctx = runtime.NewServerMetadataContext(ctx, md)
		if err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(ctx, mux, out, w, r, resp, mux.GetForwardResponseOptions()...)
	})
	if err != nil {
		return err
	}
	return frontendv1.RegisterFrontendAdminServiceHandler(ctx, mux, conn)
}
