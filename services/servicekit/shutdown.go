package servicekit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// closeGrace is how long shutdown waits, after cutting the drain at its deadline, for
// the cut handlers to return before it closes their clients anyway. It is also the
// least time the OnShutdown hooks get, however late they start.
const closeGrace = time.Second

// shutdown stops the server in four phases, each logged once. Every service gets this
// order; a service hooks into it with Done, OnDrain and OnShutdown.
//
//  1. NOT_SERVING: the gRPC health service (the whole server and every service; Watch
//     streams are told, then ended in phase 2) and /healthz (503). Peers and load
//     balancers stop sending work. For ShutdownNotice (part of ShutdownTimeout) the
//     server goes on accepting connections and calls as before, so that a peer that
//     learns of the shutdown from its next health check or probe, rather than from a
//     Watch, is not refused meanwhile.
//  2. Stop accepting: the HTTP server closes its listener and its idle connections
//     (http.Server.Shutdown), and keeps no connection alive past its current
//     response; the gRPC server closes its listener and sends GOAWAY on every
//     connection, so new RPCs are refused (grpc.Server.GracefulStop). The two run
//     together. A gateway request whose loopback RPC had not started yet is then
//     refused (503) like any new request, which it effectively is. Once both
//     listeners are closed, Done is closed and the OnDrain hooks run: the endless
//     streams end, and their clients' reconnects are refused.
//  3. Drain: in-flight HTTP requests (SSE streams included) and gRPC calls (unary and
//     streaming) run to their end, until ShutdownTimeout after phase 1. At that
//     deadline what is left is cut (http.Server.Close, grpc.Server.Stop cancel the
//     handlers' contexts), with a warning that says how much, and the cut handlers
//     get closeGrace to return.
//  4. Close: the OnShutdown hooks close the clients the drained calls were using,
//     then the gateway's loopback connection is closed.
//
// The service's background loops (Run) see their context end as phase 1 begins.
func (s *Server) shutdown(glis, hlis *notifyListener) {
	start := time.Now()
	deadline := start.Add(s.opts.ShutdownTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	s.mu.Lock()
	drainHooks, closeHooks := slices.Clone(s.drainHooks), slices.Clone(s.closeHooks)
	s.mu.Unlock()

	// 1. NOT_SERVING, then the notice for peers (cut short by the deadline).
	s.health.Shutdown()
	s.log.Info("shutdown: health NOT_SERVING", "timeout", s.opts.ShutdownTimeout.String(), "notice", s.opts.ShutdownNotice.String())
	if s.opts.ShutdownNotice > 0 {
		notice := time.NewTimer(s.opts.ShutdownNotice)
		select {
		case <-notice.C:
		case <-ctx.Done():
		}
		notice.Stop()
	}

	// 2. Stop accepting.
	httpDrained := make(chan error, 1)
	if hlis != nil {
		go func() { httpDrained <- s.httpSrv.Shutdown(ctx) }()
	} else {
		httpDrained <- nil
	}
	grpcDrained := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(grpcDrained)
	}()
	for _, l := range []*notifyListener{glis, hlis} {
		if l != nil {
			waitOrDone(ctx, l.closed)
		}
	}
	close(s.done)
	s.log.Info("shutdown: refusing new connections and calls, draining",
		"http_in_flight", s.httpCalls.count(), "grpc_in_flight", s.grpcCalls.count())
	runHooks(ctx, drainHooks)

	// 3. Drain.
	drained := true
	if err := <-httpDrained; err != nil {
		// Shutdown returns the deadline's error, or closing a listener's after the drain.
		drained = !errors.Is(err, context.DeadlineExceeded)
		if drained {
			s.log.Warn("shutdown: closing the HTTP listener", "err", err)
		}
	}
	drained = drained && waitOrDone(ctx, grpcDrained)
	if drained {
		s.log.Info("shutdown: drained", "took", time.Since(start).String())
	} else {
		s.log.Warn("shutdown: drain cut at the deadline, force-closing what is still in flight",
			"timeout", s.opts.ShutdownTimeout.String(),
			"http_in_flight", s.httpCalls.count(), "grpc_in_flight", s.grpcCalls.count())
		s.httpSrv.Close()
		s.grpc.Stop()
		graceCtx, graceCancel := context.WithTimeout(context.Background(), closeGrace)
		if !waitOrDone(graceCtx, grpcDrained) || !waitOrDone(graceCtx, s.httpCalls.idle()) {
			s.log.Warn("shutdown: handlers still running after the cut; closing clients anyway",
				"http_in_flight", s.httpCalls.count(), "grpc_in_flight", s.grpcCalls.count())
		}
		graceCancel()
	}

	// 4. Close.
	s.log.Info("shutdown: closing clients", "hooks", len(closeHooks))
	hookDeadline := deadline
	if least := time.Now().Add(closeGrace); least.After(hookDeadline) {
		hookDeadline = least
	}
	hookCtx, hookCancel := context.WithDeadline(context.Background(), hookDeadline)
	runHooks(hookCtx, closeHooks)
	hookCancel()
	if err := s.loopback.Close(); err != nil {
		s.log.Warn("shutdown: closing the gateway loopback connection", "err", err)
	}
	if s.healthGRPC != nil {
		s.healthGRPC.Stop() // probes saw NOT_SERVING since phase 1
	}
	s.log.Info("shutdown: stopped", "took", time.Since(start).String())
}

// runHooks runs hooks last-registered first, like defers.
func runHooks(ctx context.Context, hooks []func(context.Context)) {
	for _, h := range slices.Backward(hooks) {
		h(ctx)
	}
}

// waitOrDone waits for ch to close or ctx to end, and reports whether ch closed.
func waitOrDone(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// inflight counts the calls being handled, HTTP or gRPC: what the drain is waiting for,
// what a cut reports, and what shutdown waits on after a cut before closing clients.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; made by idle
}

func (c *inflight) add(d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += d
	if c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
}

func (c *inflight) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// idle is closed once no call is in flight (at once if none is now).
func (c *inflight) idle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if c.zero == nil {
		c.zero = make(chan struct{})
	}
	return c.zero
}

func (c *inflight) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c.add(1)
	defer c.add(-1)
	return handler(ctx, req)
}

func (c *inflight) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c.add(1)
	defer c.add(-1)
	return handler(srv, ss)
}

func (c *inflight) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.add(1)
		defer c.add(-1)
		next.ServeHTTP(w, r)
	})
}

// notifyListener tells when it has been closed, by whichever of net/http, grpc-go or
// Close: phase 2 waits for both listeners before it ends the endless streams.
type notifyListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func newNotifyListener(l net.Listener) *notifyListener {
	return &notifyListener{Listener: l, closed: make(chan struct{})}
}

func (l *notifyListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}
