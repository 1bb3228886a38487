package scheduler

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit"
)

// registerGateway registers the REST mapping (proto/gateway.yaml) on the
// gateway, and before it GetProgram for a session id that holds '/'
// (session ids come from the clients' headers, "team/a/agent-1"), escaped
// by the client ("team%2Fa%2Fagent-1") or not: servicekit.HandleIDWithSlashes
// takes the rest of the path as the id.
func registerGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	err := servicekit.HandleIDWithSlashes(mux, "/v1/programs/{session_id=**}", "session_id", schedulerv1.SchedulerService_GetProgram_FullMethodName,
		func(id string) *schedulerv1.GetProgramRequest { return &schedulerv1.GetProgramRequest{SessionId: id} }, client.GetProgram)
	if err != nil {
		return err
	}
	return schedulerv1.RegisterSchedulerServiceHandler(ctx, mux, conn)
}
