package flashindexer

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/services/servicekit"
)

// The shell of --stale-after. kvfollow (shared with the session-prefix
// indexer) follows the streams and says when each worker's subscription opens
// and ends, and on which connection; a prober asks each subscribed shim for
// its gRPC health over that connection, so a path that went silent (a
// partition, a frozen shim) is told from an idle worker. What it learns goes
// into the freshness core (flashindex.Freshness); FindMatches leaves stale
// workers out, and a stale worker that shows life again is reloaded from its
// snapshot (kvfollow's Resync).
//
// The shared pool's stream (pool.go) follows the same rule with a prober
// and a Freshness of its own: its pages stop counting while it is stale,
// and count again once a snapshot is loaded or the events from the position
// the pool index had are applied up to the pool's last.

// resyncStale is the reason of a snapshot reload of a stale worker.
const resyncStale = "stale"

// prober probes the peers (shims, or the kv-pool) with an open
// subscription, each named by its key in fresh.
type prober struct {
	fresh *flashindex.Freshness
	now   func() time.Time
	// resync reloads a stale peer that answered from its snapshot.
	resync func(key string)
	// announce logs and counts the transitions fresh.Check returns.
	announce func([]flashindex.Transition)

	mu      sync.Mutex
	workers map[string]*probeTarget
}

// probeTarget is the connection kvfollow last subscribed to a worker on.
type probeTarget struct {
	conn    grpc.ClientConnInterface
	open    bool // a subscription is open on conn
	probing bool // a probe is in flight (not doubled)
}

func newProber(fresh *flashindex.Freshness, now func() time.Time, resync func(string), announce func([]flashindex.Transition)) *prober {
	return &prober{fresh: fresh, now: now, resync: resync, announce: announce, workers: map[string]*probeTarget{}}
}

// subscribed is kvfollow's OnSubscribe (and the pool follower's).
func (p *prober) subscribed(worker string, conn grpc.ClientConnInterface) {
	p.mu.Lock()
	w := p.workers[worker]
	if w == nil || w.conn != conn {
		w = &probeTarget{conn: conn}
		p.workers[worker] = w
	}
	w.open = true
	p.mu.Unlock()
	p.fresh.Opened(worker)
}

// ended is kvfollow's OnEnd (and the pool follower's).
func (p *prober) ended(worker string) {
	p.mu.Lock()
	if w := p.workers[worker]; w != nil {
		w.open = false
	}
	p.mu.Unlock()
	p.fresh.Ended(worker)
}

// removed forgets a worker that left the fleet.
func (p *prober) removed(worker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.workers, worker)
}

// run probes until ctx is done: every interval it asks each subscribed shim
// for its health over the subscription's connection (one probe in flight per
// worker, each waiting up to timeout: a slow answer still counts if it comes
// within the bound), and announces workers turning stale or fresh.
func (p *prober) run(ctx context.Context, interval, timeout time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for worker, w := range p.due() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.probe(ctx, worker, w, timeout)
			}()
		}
		p.announce(p.fresh.Check(p.now()))
	}
}

// due returns the workers with an open subscription and no probe in flight,
// marked as probing.
func (p *prober) due() map[string]*probeTarget {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]*probeTarget{}
	for worker, w := range p.workers {
		if w.open && !w.probing {
			w.probing = true
			out[worker] = w
		}
	}
	return out
}

func (p *prober) probe(ctx context.Context, worker string, w *probeTarget, timeout time.Duration) {
	defer func() {
		p.mu.Lock()
		w.probing = false
		p.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !answered(servicekit.CheckHealth(pctx, w.conn)) {
		return
	}
	// Reachable again but stale: reload the snapshot now, rather than when
	// the next batch comes.
	if p.fresh.Probed(worker, p.now()) {
		p.resync(worker)
	}
}

// answered reports whether the shim itself answered: any status but a
// transport failure shows the path works (a draining shim answers
// NOT_SERVING, one without the health service UNIMPLEMENTED).
func answered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// announce logs and counts each worker turning stale or fresh again.
func (s *Service) announce(ts []flashindex.Transition) {
	for _, t := range ts {
		if t.Stale {
			s.m.stale.Inc()
			s.log.Warn("worker's KV events are stale: its blocks no longer count as hits until it is reloaded from its snapshot",
				"worker", t.Worker, "last_seen_alive", t.Since, "stale_after", s.cfg.StaleAfter)
		} else {
			s.log.Info("stale worker reloaded from its snapshot: its blocks count as hits again", "worker", t.Worker)
		}
	}
}
