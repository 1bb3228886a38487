package frontend

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// slowHealth answers SERVING after delay, unless the call ends first.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	delay time.Duration
}

func (h slowHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	select {
	case <-time.After(h.delay):
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// A probe cut short by its caller's own deadline (a Route's route timeout
// passing while it probed) says nothing of the peer: neither the caller nor
// a call that joined the probe takes the peer as failed, and the next probe
// asks again and finds it alive.
func TestProbeEndedByItsCallerIsNoVerdict(t *testing.T) {
	addr := servicetest.Serve(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, slowHealth{delay: 100 * time.Millisecond}) })
	conn, err := servicekit.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p := newHealthProbe(conn, "the peer")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	prober := make(chan error, 1)
	go func() { prober <- p.alive(ctx) }()
	servicetest.EventuallyWithin(t, 5*time.Second, "the probe in flight", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.probing != nil || !p.probedAt.IsZero() || len(prober) > 0
	})
	joined := make(chan error, 1)
	go func() { joined <- p.alive(context.Background()) }()
	if err := <-prober; !errors.Is(err, errNoVerdict) {
		t.Errorf("the prober, its deadline passed: %v, want no verdict", err)
	}
	if err := <-joined; err != nil && !errors.Is(err, errNoVerdict) {
		t.Errorf("a call that joined the probe: %v, want no verdict (or alive)", err)
	}
	if err := p.alive(context.Background()); err != nil {
		t.Errorf("the next probe: %v, want alive", err)
	}
}
