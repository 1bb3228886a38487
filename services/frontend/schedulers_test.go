package frontend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/turns"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// With scheduler replicas, each session's turns go to its owner and finish
// there; when the owner dies its sessions go to the next owner, and no turn
// fails.
func TestTurnsGoToTheirOwnerAndFailOver(t *testing.T) {
	m := newMesh(t, nil) // its shim, and a scheduler that routes to it
	var scheds [2]*fakeScheduler
	var addrs [2]string
	var stops [2]func()
	for i := range scheds {
		scheds[i] = &fakeScheduler{workerID: m.sched.workerID, addr: m.sched.addr, finished: make(chan struct{}, 64)}
		addrs[i], stops[i] = servicetest.ServeAt(t, "", func(s *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(s, scheds[i]) })
	}
	cfg := DefaultConfig()
	cfg.ModelAliases = []string{"m"}
	cfg.SchedulerAddr = addrs[0] + "," + addrs[1]
	run, _ := servicetest.Start(t, servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0"},
		func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	url := "http://" + run.Server.HTTPAddr() + "/v1/chat/completions"

	// Sessions until each replica owns a few: which replica owns a session
	// hangs on the servers' ports, so a fixed number of sessions all fell to
	// one replica now and then (a flaky test).
	names := addrs[:]
	owned := [2]int{}
	sessions := 0
	for ; owned[0] < 3 || owned[1] < 3; sessions++ {
		owned[turns.Owner(admission.Key{Tenant: AnonymousTenant, SessionID: fmt.Sprint("s-", sessions)}, names)]++
	}
	turn := func() {
		for i := range sessions {
			postOK(t, url, turn1, "x-session-id", fmt.Sprint("s-", i))
		}
	}
	turn()
	for i, s := range scheds {
		if got := len(s.routeCalls()); got != owned[i] {
			t.Fatalf("scheduler %d routed %d turns, owns %d sessions", i, got, owned[i])
		}
	}
	// Each turn finished where it was routed.
	for i, s := range scheds {
		if !servicetest.Poll(servicetest.Patience, func() bool { return len(s.finishCalls()) == owned[i] }) {
			t.Fatalf("scheduler %d finished %d turns, routed %d", i, len(s.finishCalls()), owned[i])
		}
	}
	stops[0]()
	turn() // every turn answered (postOK), scheduler 0's sessions by 1
	if got := len(scheds[1].routeCalls()); got != owned[1]+sessions {
		t.Fatalf("after scheduler 0 died, scheduler 1 routed %d turns, want %d", got, owned[1]+sessions)
	}

	// The admin view is the fleet's, merged over the replicas: with
	// scheduler 0 down the turns only it recorded are missing, and the
	// answer says so.
	conn, err := servicekit.Dial(run.Server.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := frontendv1.NewFrontendAdminServiceClient(conn)
	ctx := context.Background()
	list, err := admin.ListSessions(ctx, &frontendv1.ListSessionsRequest{})
	if err != nil || list.GetSchedulersMissing() != 1 || len(list.GetSessions()) != sessions {
		t.Fatalf("with scheduler 0 down: %v, %v", list, err)
	}
	// Back on its address, its turns count again: every session has both
	// its turns, summed over the replicas that routed them.
	_, stops[0] = servicetest.ServeAt(t, addrs[0], func(s *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(s, scheds[0]) })
	whole := func() bool {
		list, err = admin.ListSessions(ctx, &frontendv1.ListSessionsRequest{})
		if err != nil || list.GetSchedulersMissing() != 0 || len(list.GetSessions()) != sessions {
			return false
		}
		for _, s := range list.GetSessions() {
			if s.GetTurns() != 2 {
				return false
			}
		}
		return true
	}
	if !servicetest.Poll(servicetest.Patience, whole) {
		t.Fatalf("with scheduler 0 back: %v, %v", list, err)
	}
	one, err := admin.GetSession(ctx, &frontendv1.GetSessionRequest{SessionId: "s-0"})
	if err != nil || one.GetSession().GetTurns() != 2 {
		t.Fatalf("GetSession s-0 = %v, %v", one, err)
	}
	stops[0]()
	stops[1]()
	if _, err := admin.ListSessions(ctx, &frontendv1.ListSessionsRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("no scheduler up: %v, want UNAVAILABLE", err)
	}
}

// A scheduler replica that stops answering without failing (its process
// stopped: calls and health checks hang, its connection stays up) holds a
// turn of a session it owns for about probeAfter + probeTimeout, not until
// the connection's keepalive gives up: the turn goes to the next owner, and
// so do the session's next turns, at once, until the owner answers its
// health again; then they go back to it.
func TestFrozenSchedulerReplicaIsLeftWithinSeconds(t *testing.T) {
	m := newMesh(t, nil) // its shim, and a scheduler that routes to it
	var scheds [2]*fakeScheduler
	var addrs [2]string
	for i := range scheds {
		scheds[i] = &fakeScheduler{workerID: m.sched.workerID, addr: m.sched.addr, finished: make(chan struct{}, 64)}
		addrs[i] = servicetest.Serve(t, scheds[i].register)
	}
	cfg := DefaultConfig()
	cfg.ModelAliases = []string{"m"}
	cfg.SchedulerAddr = addrs[0] + "," + addrs[1]
	run, _ := servicetest.Start(t, servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0"},
		func(srv *servicekit.Server) (*Service, error) { return New(cfg, srv) })
	url := "http://" + run.Server.HTTPAddr() + "/v1/chat/completions"
	session := "s-0"
	for i := 0; turns.Owner(admission.Key{Tenant: AnonymousTenant, SessionID: session}, addrs[:]) != 0; i++ {
		session = fmt.Sprint("s-", i)
	}

	postOK(t, url, turn1, "x-session-id", session)
	scheds[0].frozen.Store(true)
	start := time.Now()
	postOK(t, url, turn1, "x-session-id", session)
	if took := time.Since(start); took > probeAfter+probeTimeout+2*time.Second {
		t.Errorf("the frozen owner held the turn %v", took)
	}
	start = time.Now()
	postOK(t, url, turn1, "x-session-id", session)
	if took := time.Since(start); took > probeAfter {
		t.Errorf("the next turn waited %v for the owner known silent", took)
	}
	if got := len(scheds[1].routeCalls()); got != 2 {
		t.Fatalf("the next owner routed %d turns, want the 2 sent while the owner was frozen", got)
	}

	scheds[0].frozen.Store(false)
	back := func() bool {
		postOK(t, url, turn1, "x-session-id", session)
		return len(scheds[0].routeCalls()) > 1
	}
	if !servicetest.Poll(servicetest.Patience, back) {
		t.Fatal("the owner answers again, but its session's turns do not go back to it")
	}
}
