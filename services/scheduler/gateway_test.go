package scheduler

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// TestGatewayProgramOfSessionIDWithSlash: a session id holding '/' (the
// clients' header names it as it likes) is addressable in GetProgram's REST
// path, escaped or not; ids without '/' and the list keep their routes, and
// the query's tenant still reaches the call (its session_id does not
// replace the path's).
func TestGatewayProgramOfSessionIDWithSlash(t *testing.T) {
	opts := servicekit.DefaultOptions("scheduler")
	opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	opts.ShutdownNotice = 0
	cfg := DefaultConfig()
	cfg.Policy = "session_aware"
	cfg.FlashIndexerAddr = "127.0.0.1:1"
	cfg.WorkerHealthInterval = 0
	run, _ := servicetest.Start(t, opts, func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	ctx, client := context.Background(), schedulerv1.NewSchedulerServiceClient(run.Conn)
	if _, err := client.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: worker("w1", 1<<20)}); err != nil {
		t.Fatal(err)
	}
	const id = "team/a/agent-1"
	for _, session := range []string{id, "plain"} {
		req := routeReq("r-"+session, session, 64)
		req.Agent = &agentv1.AgentContext{SessionId: session, Tenant: "acme"}
		if _, err := client.Route(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + run.Server.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{
		"/v1/programs/" + url.PathEscape(id) + "?tenant=acme", // team%2Fa%2Fagent-1
		"/v1/programs/" + id + "?tenant=acme",
		"/v1/programs/" + url.PathEscape(id) + "?tenant=acme&session_id=plain",
	} {
		var got schedulerv1.GetProgramResponse
		code, b := get(path)
		if err := protojson.Unmarshal([]byte(b), &got); code != http.StatusOK || err != nil || got.GetProgram().GetSessionId() != id {
			t.Errorf("GET %s: %d %s, want the program of %q", path, code, b, id)
		}
	}
	if code, b := get("/v1/programs/" + url.PathEscape(id) + "?tenant=other"); code != http.StatusNotFound {
		t.Errorf("GET %s of another tenant: %d %s, want 404", id, code, b)
	}
	for path, want := range map[string]string{"/v1/programs/plain?tenant=acme": `"sessionId":"plain"`, "/v1/programs": id} {
		if code, b := get(path); code != http.StatusOK || !strings.Contains(b, want) {
			t.Errorf("GET %s: %d %s, want %s", path, code, b, want)
		}
	}
}
