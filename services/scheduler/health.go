package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	"switchyard.dev/pkg/registry"
	"switchyard.dev/services/servicekit"
)

// Worker health: a lease only lapses LeaseTTL after a shim's last heartbeat,
// and until then every turn routed to a dead shim fails once and migrates.
// The scheduler therefore asks each shim's grpc.health.v1 service itself,
// every WorkerHealthInterval and at once when a frontend reports a failed
// attempt (FinishRequest.worker_failed). A shim that does not answer SERVING
// within WorkerHealthTimeout is deregistered, exactly as if its lease had
// lapsed; it comes back by itself, because its next heartbeat is told
// NOT_FOUND and it registers again (a restarted shim registers at start).

// errHealthShutdown: the checker stopped with the service.
var errHealthShutdown = errors.New("scheduler: health checker stopped")

// healthChecker keeps one connection per shim incarnation and checks them.
// A connection is kept per address and epoch: a shim that restarts (a new
// epoch) is checked over a fresh connection, not one still backing off from
// its predecessor's death, which would fail at once and deregister the
// shim the moment it registered.
type healthChecker struct {
	dial    func(string, ...grpc.DialOption) (*grpc.ClientConn, error)
	timeout time.Duration
	mu      sync.Mutex
	conns   map[shimKey]*grpc.ClientConn
}

type shimKey struct {
	addr  string
	epoch uint64
}

func newHealthChecker(dial func(string, ...grpc.DialOption) (*grpc.ClientConn, error), timeout time.Duration) *healthChecker {
	return &healthChecker{dial: dial, timeout: timeout, conns: map[shimKey]*grpc.ClientConn{}}
}

// check asks one shim for its whole server's status.
func (h *healthChecker) check(ctx context.Context, key shimKey) error {
	conn, err := h.conn(key)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	return servicekit.CheckHealth(cctx, conn)
}

func (h *healthChecker) conn(key shimKey) (*grpc.ClientConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns == nil {
		return nil, errHealthShutdown
	}
	if c, ok := h.conns[key]; ok {
		return c, nil
	}
	c, err := h.dial(key.addr)
	if err != nil {
		return nil, err
	}
	h.conns[key] = c
	return c, nil
}

// prune closes the connections of shims no longer registered.
func (h *healthChecker) prune(live map[shimKey]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, c := range h.conns {
		if !live[key] {
			c.Close()
			delete(h.conns, key)
		}
	}
}

func (h *healthChecker) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

// watchHealth checks every worker each interval, and a reported one at once,
// until ctx ends. Checks of one round run in parallel, so a round takes at
// most the timeout however many shims hang.
func (s *Service) watchHealth(ctx context.Context) {
	h := newHealthChecker(s.dial, s.cfg.WorkerHealthTimeout)
	defer h.close()
	t := time.NewTicker(s.cfg.WorkerHealthInterval)
	defer t.Stop()
	for {
		var only string
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case only = <-s.suspects:
		}
		var round []*registry.Worker
		live := map[shimKey]bool{}
		for _, w := range s.reg.Snapshot() {
			live[shimKey{w.Address, w.Epoch}] = true
			if only == "" || w.ID == only {
				round = append(round, w)
			}
		}
		if only == "" {
			h.prune(live)
		}
		s.checkRound(ctx, h, round)
	}
}

// checkRound checks workers in parallel and deregisters those that fail.
func (s *Service) checkRound(ctx context.Context, h *healthChecker, ws []*registry.Worker) {
	errs := make([]error, len(ws))
	start := time.Now()
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.check(ctx, shimKey{w.Address, w.Epoch})
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	// The checks run in parallel, so a round takes at most the timeout: one
	// that took far longer found this process stalled (stopped, starved),
	// and its failures may be answers that arrived unread: the next round
	// asks again (as the lease reaper gives leases a grace after a stall).
	if took := time.Since(start); took > 2*h.timeout+time.Second {
		s.log.Warn("a worker health round took far past its timeout (the scheduler stalled); its failures are asked again next round",
			"took", took.Round(time.Millisecond).String(), "timeout", h.timeout.String())
		return
	}
	for i, w := range ws {
		if errs[i] != nil {
			s.removeUnhealthy(w, errs[i])
		}
	}
}

// removeUnhealthy deregisters a worker that failed its health check, unless
// it registered again (a new epoch or address) while it was being checked.
// A shim that answers NOT_SERVING is stopping (it drains, then deregisters
// itself): no failure, and no warning, when the check sees it first.
func (s *Service) removeUnhealthy(w *registry.Worker, cause error) {
	if _, removed, err := s.reg.DeregisterIf(w.ID, w.Epoch, w.Address); err != nil || !removed {
		return // gone already, or registered again while it was checked
	}
	if errors.Is(cause, servicekit.ErrNotServing) {
		s.log.Info("worker is stopping; not routed to until it registers again", "worker_id", w.ID, "address", w.Address)
	} else {
		s.metrics.healthFailures.Inc()
		s.log.Warn("worker failed its health check; not routed to until it registers again",
			"worker_id", w.ID, "address", w.Address, "err", cause)
	}
	s.forgetWorker(w.ID)
}

// suspect asks for an immediate check of a worker a frontend saw fail. It
// never blocks the caller: when checks are already queued, the next round
// covers it.
func (s *Service) suspect(workerID string) {
	if s.suspects == nil || workerID == "" {
		return
	}
	select {
	case s.suspects <- workerID:
	default:
	}
}
