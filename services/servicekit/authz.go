package servicekit

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	callsv1 "switchyard.dev/gen/switchyard/calls/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	kvhintv1 "switchyard.dev/gen/switchyard/kvhint/v1"
	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
)

// Who may call what: one table for the whole mesh, checked by one interceptor
// on every service when mutual TLS is on. A method missing from the table is
// refused to everyone. The callers are the service names of the identities
// (tls.go); "admin" is an operator's certificate. The table mirrors the calls
// the services make (the NetworkPolicies of deploy/ admit the same ones).

// rule is one method's allow-list.
type rule struct {
	callers []string
	// worker, when set, is the worker id a request is about: the caller's
	// identity must be that worker's (an engine shim registers only itself).
	worker func(req any) string
}

const (
	frontend      = "frontend"
	scheduler     = "scheduler"
	flashIndexer  = "flash-indexer"
	sessionIndex  = "session-prefix-indexer"
	kvhintEmitter = "kvhint-emitter"
	engineShim    = "engine-shim"
	kvPool        = "kv-pool"
	admin         = AdminIdentity
	tenant        = TenantIdentity
	anyMesh       = "*" // any identity of the trust domain
)

// TenantIdentity is the identity a public REST gateway (the frontend's)
// gives calls of API clients: they hold no certificate, and the service
// itself authenticates them by API key.
const TenantIdentity = "tenant"

func callers(c ...string) rule { return rule{callers: c} }

// ownWorker: only the engine shim whose identity is the request's worker.
func ownWorker(id func(req any) string) rule { return rule{callers: []string{engineShim}, worker: id} }

var acl = map[string]rule{
	// The scheduler: shims register themselves, frontends route, the
	// indexers and the hint emitter follow its streams.
	schedulerv1.SchedulerService_RegisterWorker_FullMethodName: ownWorker(func(r any) string {
		return r.(*schedulerv1.RegisterWorkerRequest).GetWorker().GetWorkerId()
	}),
	schedulerv1.SchedulerService_Heartbeat_FullMethodName: ownWorker(func(r any) string {
		return r.(*schedulerv1.HeartbeatRequest).GetWorkerId()
	}),
	schedulerv1.SchedulerService_DeregisterWorker_FullMethodName: ownWorker(func(r any) string {
		return r.(*schedulerv1.DeregisterWorkerRequest).GetWorkerId()
	}),
	schedulerv1.SchedulerService_ListWorkers_FullMethodName:         callers(frontend, admin),
	schedulerv1.SchedulerService_WatchWorkers_FullMethodName:        callers(flashIndexer, sessionIndex, kvhintEmitter, admin),
	schedulerv1.SchedulerService_Route_FullMethodName:               callers(frontend),
	schedulerv1.SchedulerService_FinishRequest_FullMethodName:       callers(frontend),
	schedulerv1.SchedulerService_MarkPrefillComplete_FullMethodName: callers(frontend),
	schedulerv1.SchedulerService_ListPrograms_FullMethodName:        callers(frontend, admin),
	schedulerv1.SchedulerService_GetProgram_FullMethodName:          callers(admin),
	// Scheduler replicas stream each other's admission use.
	schedulerv1.SchedulerService_GetAdmissionUse_FullMethodName:     callers(scheduler, admin),
	schedulerv1.SchedulerService_WatchAdmissionUse_FullMethodName:   callers(scheduler, admin),
	schedulerv1.SchedulerService_ListSessions_FullMethodName:        callers(frontend, admin),
	schedulerv1.SchedulerService_WatchPrograms_FullMethodName:       callers(frontend, sessionIndex, kvhintEmitter, admin),
	schedulerv1.SchedulerService_WatchRouteDecisions_FullMethodName: callers(sessionIndex, admin),

	// An engine shim: frontends generate, the indexers follow its KV, only
	// the hint emitter sends hints.
	enginev1.EngineShimService_Generate_FullMethodName:          callers(frontend),
	enginev1.EngineShimService_SubscribeKvEvents_FullMethodName: callers(flashIndexer, sessionIndex, admin),
	enginev1.EngineShimService_GetKvSnapshot_FullMethodName:     callers(flashIndexer, sessionIndex, admin),
	enginev1.EngineShimService_ApplyKvHints_FullMethodName:      callers(kvhintEmitter),
	enginev1.EngineShimService_GetLoad_FullMethodName:           callers(admin),

	// The flash indexer answers the scheduler.
	flashindexv1.FlashIndexerService_FindMatches_FullMethodName:  callers(scheduler, admin),
	flashindexv1.FlashIndexerService_PredictRoute_FullMethodName: callers(scheduler),
	flashindexv1.FlashIndexerService_FindResident_FullMethodName: callers(scheduler, admin),
	flashindexv1.FlashIndexerService_GetStats_FullMethodName:     callers(admin),
	flashindexv1.FlashIndexerService_DumpWorker_FullMethodName:   callers(admin),

	// The session-prefix indexer answers the hint emitter.
	sessionindexv1.SessionPrefixIndexerService_GetSessionLineage_FullMethodName:  callers(kvhintEmitter, admin),
	sessionindexv1.SessionPrefixIndexerService_GetSessionLineages_FullMethodName: callers(kvhintEmitter, admin),
	sessionindexv1.SessionPrefixIndexerService_ListSessions_FullMethodName:       callers(admin),
	sessionindexv1.SessionPrefixIndexerService_GetStats_FullMethodName:           callers(admin),

	kvhintv1.KvHintEmitterService_ListPolicies_FullMethodName:    callers(admin),
	kvhintv1.KvHintEmitterService_ListRecentHints_FullMethodName: callers(frontend, admin),
	kvhintv1.KvHintEmitterService_GetStats_FullMethodName:        callers(frontend, admin),

	// The shared pool: shims write and read pages, the flash indexer
	// follows its events.
	kvpoolv1.KvPoolService_PutPages_FullMethodName:            callers(engineShim),
	kvpoolv1.KvPoolService_PutObjects_FullMethodName:          callers(engineShim),
	kvpoolv1.KvPoolService_RemoveObjects_FullMethodName:       callers(engineShim),
	kvpoolv1.KvPoolService_GetPrefix_FullMethodName:           callers(engineShim),
	kvpoolv1.KvPoolService_SubscribePoolEvents_FullMethodName: callers(flashIndexer, admin),
	kvpoolv1.KvPoolService_GetStats_FullMethodName:            callers(admin),

	// The frontend's admin API: operators, and API clients through its
	// public REST gateway, whom the frontend scopes by key (a tenant sees
	// only its own sessions).
	frontendv1.FrontendAdminService_ListSessions_FullMethodName: callers(admin, tenant),
	frontendv1.FrontendAdminService_GetSession_FullMethodName:   callers(admin, tenant),

	// Any peer may open a call stream: each call on it is checked against
	// this table by its own method, as the unary call would be (calls.go).
	callsv1.CallService_Calls_FullMethodName: callers(anyMesh),

	// Health is every peer's to ask (the scheduler checks shims); reflection
	// (grpcurl's listing) is for operators.
	healthpb.Health_Check_FullMethodName:                             callers(anyMesh),
	healthpb.Health_Watch_FullMethodName:                             callers(anyMesh),
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      callers(admin),
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": callers(admin),
}

// restPeerKey carries, from this server's REST gateway to its own gRPC
// server, the identity of the HTTP client the gateway is calling for
// (empty: it presented no certificate). Only this server's own gateway may
// send it: it is honoured from a peer of this server's own identity that
// also sends restTokenKey with this process's gatewayToken. The identity
// alone is not enough, because a service's replicas share its certificate:
// one replica could otherwise call another as an operator or as any shim.
// The gateway drops headers of these names from HTTP requests.
const (
	restPeerKey  = "x-switchyard-rest-peer"
	restTokenKey = "x-switchyard-rest-token"
)

// authorizer checks calls against acl.
type authorizer struct {
	self        Identity
	trustDomain string
	// gatewayToken is a secret of this process that its REST gateway sends
	// beside restPeerKey (see there).
	gatewayToken string
	log          *slog.Logger
}

// callerOf is the identity a call is made by: its TLS peer's, or for a call
// of this server's own gateway, the HTTP client's it forwards.
func (a *authorizer) callerOf(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return Identity{}, false
	}
	id, err := identityOf(info.State.PeerCertificates[0], a.trustDomain)
	if err != nil {
		return Identity{}, false
	}
	if id == a.self {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(restPeerKey); len(v) > 0 && a.fromGateway(md) {
				return parseIdentity(v[0])
			}
		}
	}
	return id, true
}

// fromGateway reports whether md carries this process's gateway token.
func (a *authorizer) fromGateway(md metadata.MD) bool {
	v := md.Get(restTokenKey)
	return len(v) == 1 && subtle.ConstantTimeCompare([]byte(v[0]), []byte(a.gatewayToken)) == 1
}

// parseIdentity reads Identity.String's form ("" is no identity).
func parseIdentity(s string) (Identity, bool) {
	if s == "" {
		return Identity{}, false
	}
	svc, inst, _ := strings.Cut(s, "/")
	return Identity{Service: svc, Instance: inst}, true
}

// authorize returns the caller's identity when it may make the call;
// otherwise a PermissionDenied (Unauthenticated without an identity),
// logged once.
func (a *authorizer) authorize(ctx context.Context, method string, req any) (Identity, error) {
	id, ok := a.callerOf(ctx)
	if !ok {
		a.log.WarnContext(ctx, "call refused: no mesh identity", "method", method)
		return Identity{}, errUnidentified
	}
	r, known := acl[method]
	allowed := known && r.allows(id.Service)
	if allowed && r.worker != nil && req != nil && r.worker(req) != id.Instance {
		a.log.WarnContext(ctx, "call refused: not the caller's own worker", "method", method, "peer", id.String())
		return Identity{}, status.Errorf(codes.PermissionDenied, "%s may act only for worker %q", id, id.Instance)
	}
	if !allowed {
		a.log.WarnContext(ctx, "call refused", "method", method, "peer", id.String())
		return Identity{}, status.Errorf(codes.PermissionDenied, "%s may not call %s", id, method)
	}
	return id, nil
}

// errUnidentified refuses a caller without a mesh identity.
var errUnidentified = status.Error(codes.Unauthenticated, "a client certificate with a mesh identity is required")

func (r rule) allows(service string) bool {
	for _, c := range r.callers {
		if c == service || c == anyMesh {
			return true
		}
	}
	return false
}

func (a *authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, err := a.authorize(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(context.WithValue(ctx, callerKey{}, id), req)
}

// stream checks streaming calls before their first message (no streaming
// method has a per-worker rule).
func (a *authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id, err := a.authorize(ss.Context(), info.FullMethod, nil)
	if err != nil {
		return err
	}
	return handler(srv, &callerStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), callerKey{}, id)})
}

type callerKey struct{}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// Caller is the mesh identity a call was authorized as; ok is false when
// mutual TLS is off (no identities).
func Caller(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(callerKey{}).(Identity)
	return id, ok
}
