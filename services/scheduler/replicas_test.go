package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/services/servicekit"
)

// serveTCP serves register's services on a loopback port until the test
// ends or stop is called.
func serveTCP(t *testing.T, register func(*grpc.Server)) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String(), g.Stop
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func queries(f *fakeIndex) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries
}

// An indexer that has not caught up is not asked; a dead one costs no
// lookup: the next answers within the same deadline.
func TestIndexersSkipTheUncaughtUpAndFailOver(t *testing.T) {
	var fakes [2]*fakeIndex
	var healths [2]*health.Server
	var addrs [2]string
	var stops [2]func()
	for i := range fakes {
		fakes[i], healths[i] = &fakeIndex{}, health.NewServer()
		healths[i].SetServingStatus(servicekit.CaughtUpService, healthpb.HealthCheckResponse_NOT_SERVING)
		addrs[i], stops[i] = serveTCP(t, func(g *grpc.Server) {
			flashindexv1.RegisterFlashIndexerServiceServer(g, fakes[i])
			healthpb.RegisterHealthServer(g, healths[i])
		})
	}
	x, err := dialIndexers(addrs[0]+","+addrs[1], func(a string, o ...grpc.DialOption) (*grpc.ClientConn, error) { return servicekit.Dial(a, o...) })
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	m := newMetrics(prometheus.NewRegistry(), func(s string) string { return s })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); x.watch(ctx, m) }()
	defer func() { cancel(); <-done }()

	lookup := func() error {
		lctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		_, _, err := x.findMatches(lctx, -1, func(int) *flashindexv1.FindMatchesRequest { return &flashindexv1.FindMatchesRequest{} })
		return err
	}
	if err := lookup(); err == nil {
		t.Fatal("no indexer caught up, yet a lookup was answered")
	}
	healths[1].SetServingStatus(servicekit.CaughtUpService, healthpb.HealthCheckResponse_SERVING)
	eventually(t, "indexer 1 ready", x.list[1].ready.Load)
	for range 10 {
		if err := lookup(); err != nil {
			t.Fatal(err)
		}
	}
	if q := queries(fakes[0]); q != 0 {
		t.Fatalf("the indexer still rebuilding was asked %d times", q)
	}
	healths[0].SetServingStatus(servicekit.CaughtUpService, healthpb.HealthCheckResponse_SERVING)
	eventually(t, "indexer 0 ready", x.list[0].ready.Load)
	for range 10 {
		if err := lookup(); err != nil {
			t.Fatal(err)
		}
	}
	if queries(fakes[0]) == 0 || queries(fakes[1]) <= 10 {
		t.Fatalf("lookups not spread: %d and %d", queries(fakes[0]), queries(fakes[1]))
	}
	// Killed: every lookup is still answered, before and after the
	// readiness watch notices.
	stops[1]()
	for range 20 {
		if err := lookup(); err != nil {
			t.Fatalf("with one indexer dead: %v", err)
		}
	}
	eventually(t, "the dead indexer not ready", func() bool { return !x.list[1].ready.Load() })
}

// Two replicas that list each other (and themselves) each count the
// other's use of a worker they share, decide with a share of it, and get it
// whole again once the other has not answered for the staleness bound.
func TestReplicasShareAWorker(t *testing.T) {
	lisA, _ := net.Listen("tcp", "127.0.0.1:0")
	lisB, _ := net.Listen("tcp", "127.0.0.1:0")
	list := lisA.Addr().String() + "," + lisB.Addr().String()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newReplica := func(lis net.Listener) (*Service, schedulerv1.SchedulerServiceClient, func()) {
		cfg := DefaultConfig()
		cfg.Seed, cfg.PeerAddrs, cfg.PeerStaleAfter = 1, list, time.Second
		cfg.Policy = "session_aware"
		svc, err := newService(cfg, log, prometheus.NewRegistry(), func(s string) string { return s },
			WithFlashIndexer(&staticIndex{resp: []*flashindexv1.FindMatchesResponse{{}}}))
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		schedulerv1.RegisterSchedulerServiceServer(g, svc)
		go g.Serve(lis)
		conn, err := servicekit.Dial(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		stop := func() { g.Stop(); svc.Close() }
		t.Cleanup(func() { conn.Close(); stop(); svc.peers.close() })
		return svc, schedulerv1.NewSchedulerServiceClient(conn), stop
	}
	a, ca, stopA := newReplica(lisA)
	b, cb, _ := newReplica(lisB)
	ctx := context.Background()
	const capTokens = 1 << 16
	register := func(c schedulerv1.SchedulerServiceClient) {
		if _, err := c.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: worker("w1", capTokens)}); err != nil {
			t.Fatal(err)
		}
	}
	capOf := func(s *Service) int64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.shareLocked()
		for _, u := range s.ctrl.Utilization(s.now()) {
			if u.Worker == "w1" {
				return u.Capacity.Tokens
			}
		}
		return -1
	}
	// A replica missing a worker its peer holds (just started, the shim
	// not registered yet) refuses routes, so that the frontend asks
	// another instead of moving a session off its worker.
	register(cb)
	whole := capOf(b) // nobody heard yet: alone
	follow := func(s *Service) {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.runPeers(fctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	follow(a)
	follow(b)
	eventually(t, "A hears B", func() bool { return a.peers.live() == 2 })
	if _, err := ca.Route(ctx, routeReq("r0", "s0", 160)); status.Code(err) != codes.Unavailable {
		t.Fatalf("A without B's worker w1 routed: %v", err)
	}
	register(ca)
	eventually(t, "A caught up", a.peers.caughtUp.Load)
	// A session of A's holds 20k tokens on w1, in its tool call.
	if _, err := ca.Route(ctx, routeReq("r1", "s1", 20_000)); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.FinishRequest(ctx, finishReq("r1", "w1", "s1", 20_000, 100)); err != nil {
		t.Fatal(err)
	}
	heardOfA := func() (int, admission.Use) {
		b.mu.Lock()
		defer b.mu.Unlock()
		n, _ := b.peers.others(b.peerSum.use, time.Now())
		return n, b.peerSum.use["w1"]
	}
	eventually(t, "B hears A's use of w1", func() bool { n, u := heardOfA(); return n == 2 && u.Tokens >= 20_000 })
	if n := a.peers.live(); n != 2 {
		t.Fatalf("A hears %d replicas, want 2 (itself once, B)", n)
	}
	if shared := capOf(b); shared >= whole || shared <= 0 {
		t.Fatalf("B's capacity of w1 with A's 20k there: %d, whole %d", shared, whole)
	}
	stopA()
	eventually(t, "A gone past the bound", func() bool { return b.peers.live() == 1 })
	if got := capOf(b); got != whole {
		t.Fatalf("alone, B's capacity of w1 is %d, want the whole %d", got, whole)
	}
}

// The kept sum of the peers' use is always what summing them again at that
// moment gives: across poll rounds (new uses, a peer heard again) and
// across a peer going stale between rounds, with nothing polled; and its
// version, never 0 once summed, changes whenever the sum does (admission
// keeps shares under it).
func TestPeerSumIsAFreshSum(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	p := &peers{self: "a", stale: 300 * time.Millisecond}
	b := &peer{id: "b", heard: t0, uses: map[string]admission.Use{"w1": {Tokens: 100, Users: 1}}}
	c := &peer{id: "c", heard: t0.Add(100 * time.Millisecond), uses: map[string]admission.Use{"w1": {Tokens: 10, Users: 1}, "w2": {Tokens: 5, Users: 1}}}
	p.list = []*peer{b, c}
	kept := peerSum{use: map[string]admission.Use{}}
	var prevUse map[string]admission.Use
	prevN, prevV := -1, uint64(0)
	check := func(at time.Duration, wantN int) {
		t.Helper()
		now := t0.Add(at)
		kept.refresh(p, now)
		fresh := map[string]admission.Use{}
		n, _ := p.others(fresh, now)
		if kept.n != n || n != wantN || !maps.Equal(kept.use, fresh) {
			t.Fatalf("at %v: kept %d replicas %v, fresh %d %v (want %d replicas)", at, kept.n, kept.use, n, fresh, wantN)
		}
		if kept.version == 0 || (kept.n != prevN || !maps.Equal(kept.use, prevUse)) && kept.version == prevV {
			t.Fatalf("at %v: the sum went from %d %v to %d %v under version %d → %d", at, prevN, prevUse, kept.n, kept.use, prevV, kept.version)
		}
		prevUse, prevN, prevV = maps.Clone(kept.use), kept.n, kept.version
	}
	check(0, 3)
	check(200*time.Millisecond, 3)
	check(301*time.Millisecond, 2) // b went stale; no poll round since
	// A round: b answers again with more, c with less.
	b.heard, b.uses = t0.Add(350*time.Millisecond), map[string]admission.Use{"w1": {Tokens: 300, Users: 1}}
	c.heard, c.uses = t0.Add(350*time.Millisecond), map[string]admission.Use{}
	p.rounds.Add(1)
	check(360*time.Millisecond, 3)
	check(651*time.Millisecond, 1) // both stale
}

// A replica's use stream sends its use at once, a change within an
// interval or so (well before the heartbeat), and then, while nothing
// changes, nothing until the heartbeat.
func TestAdmissionUseStreamSendsChangesAndHeartbeats(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := h.client.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: worker("w1", 1<<16)}); err != nil {
		t.Fatal(err)
	}
	const every, beat = 20 * time.Millisecond, 2 * time.Second
	stream, err := h.client.WatchAdmissionUse(ctx, &schedulerv1.WatchAdmissionUseRequest{
		Interval: durationpb.New(every), Heartbeat: durationpb.New(beat)})
	if err != nil {
		t.Fatal(err)
	}
	type heard struct {
		tokens float64
		at     time.Time
	}
	msgs := make(chan heard, 16)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				close(msgs)
				return
			}
			msgs <- heard{resp.GetUse().GetWorkers()[0].GetTokens(), time.Now()}
		}
	}()
	next := func(within time.Duration) heard {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("the stream ended")
			}
			return m
		case <-time.After(within):
			t.Fatalf("nothing heard within %v", within)
			return heard{}
		}
	}
	if m := next(5 * time.Second); m.tokens != 0 {
		t.Fatalf("first use %v tokens, want 0", m.tokens)
	}
	if _, err := h.client.Route(ctx, routeReq("r1", "s1", 20_000)); err != nil {
		t.Fatal(err)
	}
	changed := next(beat / 2) // sooner than the heartbeat would tell it
	if changed.tokens < 20_000 {
		t.Fatalf("after a 20k turn: %v tokens", changed.tokens)
	}
	quiet := next(beat + 5*time.Second)
	if gap := quiet.at.Sub(changed.at); gap < beat/2 || quiet.tokens != changed.tokens {
		t.Fatalf("unchanged, heard again after %v (heartbeat %v): %v tokens, before %v", gap, beat, quiet.tokens, changed.tokens)
	}
}

// silentPeer accepts use streams and never sends on them, as a peer behind
// a half-open connection would seem to.
type silentPeer struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	opens atomic.Int32
}

func (p *silentPeer) WatchAdmissionUse(_ *schedulerv1.WatchAdmissionUseRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchAdmissionUseResponse]) error {
	p.opens.Add(1)
	<-stream.Context().Done()
	return nil
}

// A peer's stream silent past the staleness bound is given up and opened
// again, not left waiting for the connection's keepalive.
func TestSilentPeerStreamIsOpenedAgain(t *testing.T) {
	peer := &silentPeer{}
	addr, _ := serveTCP(t, func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, peer) })
	cfg := DefaultConfig()
	cfg.Seed, cfg.PeerAddrs = 1, addr
	cfg.PeerSyncInterval, cfg.PeerStaleAfter = 20*time.Millisecond, 100*time.Millisecond
	svc, err := newService(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), func(s string) string { return s },
		WithFlashIndexer(&staticIndex{resp: []*flashindexv1.FindMatchesResponse{{}}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.peers.close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.runPeers(ctx) }()
	eventually(t, "the silent stream opened three times", func() bool { return peer.opens.Load() >= 3 })
	cancel()
	<-done
}

// A bound the heartbeat cannot keep is refused.
func TestPeerStaleBoundBelowThreeIntervalsIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PeerSyncInterval, cfg.PeerStaleAfter = 500*time.Millisecond, time.Second
	if _, err := cfg.withDefaults(); err == nil {
		t.Fatal("a 1 s bound with a 500 ms interval was taken")
	}
}

// A replica that stops ends its use streams cleanly: its followers hear it
// leave (io.EOF), not a fault.
func TestUseStreamEndsCleanlyWhenTheReplicaStops(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	stream, err := h.client.WatchAdmissionUse(context.Background(), &schedulerv1.WatchAdmissionUseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	h.svc.Close()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after Close: %v, want io.EOF", err)
	}
}
