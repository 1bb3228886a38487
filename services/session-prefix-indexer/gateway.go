package sessionindexer

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	"switchyard.dev/services/servicekit"
)

// registerGateway registers the REST mapping (proto/gateway.yaml) on the
// gateway, and before it GetSessionLineage for a session id that holds '/'
// (session ids come from the clients' headers, "team/a/agent-1"), escaped
// by the client ("team%2Fa%2Fagent-1") or not (servicekit.HandleIDWithSlashes).
func registerGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	client := sessionindexv1.NewSessionPrefixIndexerServiceClient(conn)
	err := servicekit.HandleIDWithSlashes(mux, "/v1/sessions/{session_id=**}/lineage", "session_id",
		sessionindexv1.SessionPrefixIndexerService_GetSessionLineage_FullMethodName,
		func(id string) *sessionindexv1.GetSessionLineageRequest {
			return &sessionindexv1.GetSessionLineageRequest{SessionId: id}
		},
		client.GetSessionLineage)
	if err != nil {
		return err
	}
	return sessionindexv1.RegisterSessionPrefixIndexerServiceHandler(ctx, mux, conn)
}
