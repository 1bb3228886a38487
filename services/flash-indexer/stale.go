package flashindexer

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// The shell of --stale-after. kvfollow (shared with the session-prefix
// indexer) follows the streams; this file watches them from outside, through
// the connections it dials for kvfollow: a stream interceptor sees each
// subscription open, deliver and end, and a prober asks each subscribed shim
// for its gRPC health over the same connection, so a path that went silent
// (a partition, a frozen shim) is told from an idle worker. What it learns
// goes into freshness; FindMatches leaves stale workers out.

// links is every shim connection handed to kvfollow, and the worker each
// address belongs to (learned from the scheduler's WatchWorkers stream, the
// one kvfollow reads, so the ids are the ones the index uses).
type links struct {
	s *Service

	mu     sync.Mutex
	byAddr map[string]string // shim address → worker id
	all    map[*link]struct{}
}

// link is one shim connection and its open subscriptions.
type link struct {
	l       *links
	addr    string
	conn    *grpc.ClientConn
	streams map[*watchedStream]struct{}
	probing bool
}

func newLinks(s *Service) *links {
	return &links{s: s, byAddr: map[string]string{}, all: map[*link]struct{}{}}
}

// dialScheduler dials the scheduler, watching its WatchWorkers answers for
// worker addresses.
func (ls *links) dialScheduler(addr string) (*grpc.ClientConn, error) {
	return ls.s.dial(addr, grpc.WithChainStreamInterceptor(ls.watchWorkers))
}

func (ls *links) watchWorkers(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != schedulerv1.SchedulerService_WatchWorkers_FullMethodName {
		return cs, err
	}
	return &workerWatch{ClientStream: cs, l: ls}, nil
}

type workerWatch struct {
	grpc.ClientStream
	l *links
}

// RecvMsg records an announced worker's address before kvfollow acts on it.
func (w *workerWatch) RecvMsg(m any) error {
	if err := w.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	ev, ok := m.(*schedulerv1.WatchWorkersResponse)
	if !ok {
		return nil
	}
	id, addr := ev.GetWorker().GetWorkerId(), ev.GetWorker().GetAddress()
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	switch ev.GetType() {
	case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_ADDED, schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_UPDATED:
		if id != "" && addr != "" {
			w.l.byAddr[addr] = id
		}
	case schedulerv1.WorkerEventType_WORKER_EVENT_TYPE_REMOVED:
		for a, known := range w.l.byAddr {
			if known == id {
				delete(w.l.byAddr, a)
			}
		}
	}
	return nil
}

// dialShim is kvfollow's Dial: a connection whose subscriptions are watched.
func (ls *links) dialShim(addr string) (*grpc.ClientConn, error) {
	l := &link{l: ls, addr: addr, streams: map[*watchedStream]struct{}{}}
	conn, err := ls.s.dial(addr, grpc.WithChainStreamInterceptor(l.intercept))
	if err != nil {
		return nil, err
	}
	l.conn = conn
	ls.mu.Lock()
	ls.prune()
	ls.all[l] = struct{}{}
	ls.mu.Unlock()
	return conn, nil
}

func (ls *links) worker(addr string) string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.byAddr[addr]
}

func (l *link) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method != enginev1.EngineShimService_SubscribeKvEvents_FullMethodName {
		return streamer(ctx, desc, cc, method, opts...)
	}
	// Its own cancel, so a stale worker's subscription can be ended from
	// here and kvfollow reloads the snapshot.
	ctx, cancel := context.WithCancel(ctx)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &watchedStream{ClientStream: cs, link: l, worker: l.l.worker(l.addr), cancel: cancel}
	l.l.mu.Lock()
	l.streams[w] = struct{}{}
	l.l.mu.Unlock()
	l.l.s.fresh.opened(w.worker)
	return w, nil
}

// watchedStream is one SubscribeKvEvents call.
type watchedStream struct {
	grpc.ClientStream
	link   *link
	worker string
	cancel context.CancelFunc
	once   sync.Once
}

// errStale ends the subscription of a stale worker; kvfollow takes it as a
// broken stream and reloads the worker from its snapshot.
var errStale = status.Error(codes.Aborted, "flash indexer: worker was stale; reload its snapshot")

func (w *watchedStream) RecvMsg(m any) error {
	if err := w.ClientStream.RecvMsg(m); err != nil {
		w.end()
		return err
	}
	// Batches flow again after an outage, but what the outage lost is only
	// in the snapshot: drop the stream rather than apply them.
	if w.link.l.s.fresh.isStale(w.worker, w.link.l.s.now()) {
		w.end()
		return errStale
	}
	return nil
}

func (w *watchedStream) end() {
	w.once.Do(func() {
		w.cancel()
		ls := w.link.l
		ls.mu.Lock()
		delete(w.link.streams, w)
		ls.mu.Unlock()
		ls.s.fresh.ended(w.worker)
	})
}

// probe runs until ctx is done: every interval it asks each subscribed
// shim for its health over the subscription's connection (one probe in
// flight per connection, each waiting up to timeout: a slow answer still
// counts if it comes within the bound), and announces workers turning stale
// or fresh.
func (ls *links) probe(ctx context.Context, interval, timeout time.Duration) {
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
		for _, l := range ls.due() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ls.probeOne(ctx, l, timeout)
			}()
		}
		ls.s.announce(ls.s.fresh.check(ls.s.now()))
	}
}

// due returns the links with an open subscription and no probe in flight.
func (ls *links) due() []*link {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.prune()
	var out []*link
	for l := range ls.all {
		if len(l.streams) > 0 && !l.probing {
			l.probing = true
			out = append(out, l)
		}
	}
	return out
}

// prune forgets the connections kvfollow closed. Needs ls.mu.
func (ls *links) prune() {
	for l := range ls.all {
		if l.conn.GetState() == connectivity.Shutdown {
			delete(ls.all, l)
		}
	}
}

func (ls *links) probeOne(ctx context.Context, l *link, timeout time.Duration) {
	defer func() {
		ls.mu.Lock()
		l.probing = false
		ls.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := healthpb.NewHealthClient(l.conn).Check(pctx, &healthpb.HealthCheckRequest{})
	if !answered(err) {
		return
	}
	worker := ls.worker(l.addr)
	if !ls.s.fresh.probed(worker, ls.s.now()) {
		return
	}
	// Reachable again but stale: end its subscriptions so kvfollow loads
	// the snapshot now, rather than when the next batch comes.
	ls.mu.Lock()
	var open []*watchedStream
	for w := range l.streams {
		open = append(open, w)
	}
	ls.mu.Unlock()
	for _, w := range open {
		w.end()
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
func (s *Service) announce(ts []transition) {
	for _, t := range ts {
		if t.stale {
			s.m.stale.Inc()
			s.log.Warn("worker's KV events are stale: its blocks no longer count as hits until it is reloaded from its snapshot",
				"worker", t.worker, "last_seen_alive", t.since, "stale_after", s.cfg.StaleAfter)
		} else {
			s.log.Info("stale worker reloaded from its snapshot: its blocks count as hits again", "worker", t.worker)
		}
	}
}
