package engineshim

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// TestReRegistersSoonAfterTheSchedulerRestarts: a scheduler killed and
// started again (same address, nothing remembered) has the worker back
// within a second or so, not at the next heartbeat a third of the lease
// (10 s here) later.
func TestReRegistersSoonAfterTheSchedulerRestarts(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	// answered is told each time a registration's answer has gone out (the
	// shim then counts itself registered).
	answered := make(chan struct{}, 4)
	serve := func(lis net.Listener) (*fakeScheduler, *grpc.Server, chan struct{}) {
		fake := &fakeScheduler{changed: make(chan struct{}, 1), lease: 30 * time.Second}
		g := grpc.NewServer(grpc.StatsHandler(endOf{method: schedulerv1.SchedulerService_RegisterWorker_FullMethodName, done: answered}))
		schedulerv1.RegisterSchedulerServiceServer(g, fake)
		done := make(chan struct{})
		go func() {
			defer close(done)
			g.Serve(lis)
		}()
		return fake, g, done
	}
	first, g1, done1 := serve(lis)
	cfg := testConfig()
	cfg.SchedulerAddr = addr
	start(t, cfg)
	registered := func(f *fakeScheduler, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for {
			f.mu.Lock()
			n := len(f.registers)
			f.mu.Unlock()
			if n > 0 {
				return
			}
			select {
			case <-f.changed:
			case <-deadline:
				t.Fatalf("not registered within %v", within)
			}
		}
	}
	registered(first, 5*time.Second)
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("the registration was never answered")
	}

	g1.Stop() // as kill -9: connections drop, nothing answers
	<-done1
	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	second, g2, done2 := serve(lis2)
	defer func() {
		g2.Stop()
		<-done2
	}()
	restarted := time.Now()
	registered(second, 3*time.Second)
	t.Logf("registered again %v after the restart", time.Since(restarted).Round(time.Millisecond))
}

// endOf signals done when a call of method has ended on the server (its
// status written).
type endOf struct {
	method string
	done   chan<- struct{}
}

type methodKey struct{}

func (e endOf) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (e endOf) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); ok && ctx.Value(methodKey{}) == e.method {
		select {
		case e.done <- struct{}{}:
		default:
		}
	}
}

func (endOf) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (endOf) HandleConn(context.Context, stats.ConnStats)                       {}
