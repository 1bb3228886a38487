package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/turns"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// Service implements switchyard.scheduler.v1.SchedulerService.
type Service struct {
	schedulerv1.UnimplementedSchedulerServiceServer

	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics
	reg     *registry.Registry
	index   *indexers // the flash indexers (indexers.go)
	// chains are recent routes' hash chains, for the sessions' next
	// routes to name as their bases.
	chains *basecache.Chains
	// dial connects to peers (the indexer, shims' health) with this
	// service's transport.
	dial func(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error)

	// mu serialises the turn pipeline (not safe for concurrent use) and
	// orders program events for WatchPrograms. ctrl is pipe's admission
	// controller, for the program views.
	mu   sync.Mutex
	pipe *turns.Pipeline
	ctrl *admission.Controller

	sessions *sessionLedger // what the admin API shows (sessions.go)
	// preds are the turns routed and not finished, for a session's next
	// turn to wait for (predecessors.go).
	preds *predecessors

	programSubs  *fanout[*schedulerv1.WatchProgramsResponse]
	decisionSubs *fanout[*schedulerv1.WatchRouteDecisionsResponse]

	// suspects are workers a frontend reported failing, for watchHealth to
	// check at once; nil when health checks are off.
	suspects chan string

	// peers are the other scheduler replicas (nil: this one alone);
	// peerSum is what they use, as shareLocked last summed it, under mu.
	peers   *peers
	peerSum peerSum

	tieStream int // the stream of the seed's tie-breaks (withTieBreakStream)

	stop     chan struct{} // closed when shutdown begins: blocked calls return
	stopOnce sync.Once
}

// Option adjusts a Service; tests use them to inject fakes.
type Option func(*Service)

// WithFlashIndexer uses client instead of dialling Config.FlashIndexerAddr.
func WithFlashIndexer(client flashindexv1.FlashIndexerServiceClient) Option {
	return func(s *Service) { s.index = oneIndexer(client) }
}

// withDial sets how the service connects to its peers (servicekit.Dial
// without it: plaintext, as the tests' fakes are).
func withDial(dial func(string, ...grpc.DialOption) (*grpc.ClientConn, error)) Option {
	return func(s *Service) { s.dial = dial }
}

// withTieBreakStream breaks the pipeline's ties with another stream of its
// seed's (turns.TieBreaks), as replay's replica of that number does.
func withTieBreakStream(stream int) Option { return func(s *Service) { s.tieStream = stream } }

// WithClock replaces the wall clock.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// New builds the service and registers its gRPC API and REST gateway on srv.
func New(cfg Config, srv *servicekit.Server, opts ...Option) (*Service, error) {
	s, err := newService(cfg, srv.Logger(), srv.Registry(), srv.MetricName, append([]Option{withDial(srv.Dial)}, opts...)...)
	if err != nil {
		return nil, err
	}
	schedulerv1.RegisterSchedulerServiceServer(srv, s)
	srv.Gateway(registerGateway)
	// Watch streams and parked Route calls would hold the drain to its deadline.
	srv.OnDrain(func(context.Context) { s.Close() })
	return s, nil
}

// newService builds the service without a server: the tests serve it over
// bufconn.
func newService(cfg Config, log *slog.Logger, promReg prometheus.Registerer, metricName func(string) string, opts ...Option) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, now: time.Now, dial: servicekit.Dial, stop: make(chan struct{}), chains: basecache.NewChains(cfg.ChainCacheHashes), preds: newPredecessors()}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	if s.pipe, err = turns.New(pipelineConfig(cfg, seed, s.tieStream)); err != nil {
		return nil, err
	}
	s.ctrl = s.pipe.Controller()
	if s.reg, err = registry.New(&registry.Config{LeaseTTL: cfg.LeaseTTL}); err != nil {
		return nil, err
	}
	if s.index == nil {
		// Dialling is lazy: the indexers may start after us.
		if s.index, err = dialIndexers(cfg.FlashIndexerAddr, s.dial); err != nil {
			return nil, err
		}
	}
	if s.peers, err = newPeers(cfg.PeerAddrs, cfg.PeerSyncInterval, cfg.PeerStaleAfter, s.dial); err != nil {
		return nil, err
	}
	s.peerSum.use = map[string]admission.Use{}
	s.metrics = newMetrics(promReg, metricName)
	if cfg.WorkerHealthInterval > 0 {
		s.suspects = make(chan string, 64)
	}
	s.sessions = newSessionLedger(cfg.MaxSessions)
	s.programSubs = newFanout[*schedulerv1.WatchProgramsResponse](s.metrics.watchersDropped.WithLabelValues("programs"))
	s.decisionSubs = newFanout[*schedulerv1.WatchRouteDecisionsResponse](s.metrics.watchersDropped.WithLabelValues("route_decisions"))
	return s, nil
}

// Close begins shutdown: blocked Route calls and watch streams return at
// once, so that a graceful stop does not wait for them.
func (s *Service) Close() { s.stopOnce.Do(func() { close(s.stop) }) }

// Run runs the background loops — lease expiry, worker health checks and
// the admission tick — until ctx is done or Close is called.
func (s *Service) Run(ctx context.Context) error {
	// Everything Run does ends with ctx or at Close, whichever comes first:
	// a tick's holdings lookup in flight too, or shutdown would wait for
	// the indexers' answer (answerHoldings).
	ctx, cancel := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Add(1)
	go func() {
		defer loops.Done()
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if s.suspects != nil {
		loops.Add(1)
		go func() {
			defer loops.Done()
			s.watchHealth(ctx)
		}()
	}
	if s.peers != nil {
		loops.Add(1)
		go func() {
			defer loops.Done()
			s.runPeers(ctx)
		}()
	}
	loops.Add(1)
	go func() {
		defer loops.Done()
		s.index.watch(ctx, s.metrics)
	}()
	defer func() {
		cancel()
		loops.Wait()
		s.Close()
		s.index.close()
		if s.peers != nil {
			s.peers.close()
		}
	}()
	s.log.Info("scheduler running", "policy", s.cfg.Policy, "flash_indexer", s.cfg.FlashIndexerAddr,
		"tick_interval", s.cfg.Admission.TickInterval, "lease_ttl", s.cfg.LeaseTTL)
	if !routing.Policy(s.cfg.Policy).Admits() {
		// Said once, by name: the watchers cannot tell an empty table from none.
		s.log.Info("this policy runs no admission control, so the program table stays empty: the hint emitter sends no KV hints and the console shows no admission decisions (--policy session_aware turns both on)",
			"policy", s.cfg.Policy)
	}
	leases := time.NewTicker(s.cfg.LeaseCheckInterval)
	defer leases.Stop()
	reaps := newReapClock(s.cfg.LeaseCheckInterval, s.cfg.LeaseTTL)
	ticks := time.NewTicker(s.cfg.Admission.TickInterval)
	defer ticks.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-leases.C:
			due, stalled := reaps.due(time.Now())
			if stalled > 0 {
				s.log.Warn("the scheduler did not run for a while (stopped or starved); worker leases get a heartbeat's grace before any expires",
					"stalled", stalled.Round(time.Millisecond).String(), "grace", reaps.grace().String())
			}
			if due {
				s.expireLeases()
			}
		case <-ticks.C:
			s.tick(ctx)
		}
	}
}

// pipelineConfig is the turn pipeline a scheduler with cfg runs, breaking
// ties with stream of seed's tie-breaks (turns.TieBreaks).
func pipelineConfig(cfg Config, seed uint64, stream int) turns.Config {
	adm := cfg.Admission
	return turns.Config{Routing: cfg.Routing, Admission: &adm, Rand: turns.TieBreaks(seed, stream)}
}

// expireLeases removes workers whose lease lapsed, everywhere.
func (s *Service) expireLeases() {
	gone, err := s.reg.Expire(s.now())
	if err != nil {
		s.log.Error("lease expiry failed", "err", err)
		return
	}
	for _, w := range gone {
		s.metrics.leaseExpiries.Inc()
		s.log.Warn("worker lease expired", "worker_id", w.ID, "address", w.Address, "lease_expired_at", w.LeaseExpiresAt)
		s.forgetWorker(w.ID)
	}
}

// forgetWorker drops a departed worker from routing and admission.
func (s *Service) forgetWorker(id string) {
	s.mu.Lock()
	s.publish(s.pipe.RemoveWorker(s.now(), id))
	w, back := s.reg.Get(id)
	if back {
		// It registered again since the registry dropped it (a shim told
		// NOT_FOUND, a restarted one), and its RegisterWorker ran before
		// this took the lock: forgotten here, it would have no capacity
		// in admission until it registered once more, which its
		// heartbeats, answered, never ask it to.
		s.setWorkerLocked(w)
	} else {
		// Under the lock, with the look at the registry: a registration
		// after it finds its series gone and makes them anew.
		s.metrics.forgetWorker(id)
	}
	s.mu.Unlock()
	s.metrics.workers.Set(float64(s.reg.Len()))
}

// tick runs one admission step, reaps stale routing state and refreshes the
// gauges; it logs when anything changed. ctx bounds only its lookup of
// what idle programs hold.
func (s *Service) tick(ctx context.Context) {
	s.answerHoldings(ctx)
	start := time.Now()
	now := s.now()
	s.mu.Lock()
	s.shareLocked()
	tk := s.pipe.Tick(now)
	rep, bindings, stale := tk.Admission, tk.BindingsExpired, tk.Stale
	// A stale turn's finish is taken as lost: a later turn of its session
	// no longer waits for it. One its worker still names running is not
	// stale, and is still waited for.
	for _, f := range stale {
		s.preds.finished(f.ID)
	}
	s.publish(rep.Events)
	counts := s.ctrl.Counts()
	// The workers' series are set under the lock, as forgetWorker drops a
	// departed worker's: set after it, they would be made again for a
	// worker that is gone.
	for _, u := range s.ctrl.Utilization(now) {
		s.metrics.utilization.WithLabelValues(u.Worker).Set(u.Utilization)
		s.metrics.countUtil.WithLabelValues(u.Worker).Set(u.CountUtilization)
		s.metrics.inflight.WithLabelValues(u.Worker).Set(float64(s.pipe.Router().Load().Worker(u.Worker).Requests))
	}
	s.mu.Unlock()

	s.metrics.tickSeconds.Observe(time.Since(start).Seconds())
	s.metrics.ticks.WithLabelValues(boolLabel(rep.Changed())).Inc()
	for l, byPhase := range counts {
		for p, n := range byPhase {
			s.metrics.programs.WithLabelValues(l.String(), p.String()).Set(float64(n))
		}
	}
	if len(stale) > 0 {
		s.log.Warn("dropped stale in-flight requests (no FinishRequest)", "count", len(stale))
	}
	if !rep.Changed() {
		return
	}
	attrs := []any{"expired", rep.Expired, "paused", rep.Paused, "marked", rep.Marked, "resumed", rep.Resumed,
		"forced_resumed", rep.ForcedResumed, "still_paused", rep.StillPaused, "soft_demoted_workers", rep.SoftDemoted,
		"bindings_expired", bindings}
	var workers []any
	for _, w := range rep.Workers {
		if w.Paused+w.Marked+w.Resumed > 0 {
			workers = append(workers, slog.Group(w.Worker, "paused", w.Paused, "marked", w.Marked,
				"resumed", w.Resumed, "util_before", round3(w.Before), "util_after", round3(w.After)))
		}
	}
	attrs = append(attrs, slog.Group("workers", workers...))
	s.log.Info("admission tick", attrs...)
}

// answerHoldings asks the flash indexers what the idle programs still hold
// on their workers (--held-from-index) and records the answers before the
// tick counts them; the lock is not held while the indexer answers, and an
// answer about a turn that ended meanwhile is dropped (Pipeline.Held). When
// no indexer answers, each program keeps what the last answer about its
// tool call said (its whole working set when there was none). The lookup
// ends with ctx (shutdown) or after half a tick interval.
func (s *Service) answerHoldings(ctx context.Context) {
	s.mu.Lock()
	qs := s.pipe.Holdings()
	s.mu.Unlock()
	if len(qs) == 0 {
		return
	}
	req := &flashindexv1.FindResidentRequest{Queries: make([]*flashindexv1.ResidentQuery, len(qs))}
	for i, q := range qs {
		req.Queries[i] = &flashindexv1.ResidentQuery{Anchors: kvwire.Uint64s(q.Hashes()), WorkerId: q.Worker}
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.Admission.TickInterval/2)
	defer cancel()
	resp, err := s.index.findResident(lctx, req)
	if err == nil && len(resp.GetAnswers()) != len(qs) {
		err = fmt.Errorf("%d answers to %d queries", len(resp.GetAnswers()), len(qs))
	}
	if err != nil && ctx.Err() != nil {
		return // stopping: the indexers did not fail
	}
	if err != nil {
		s.metrics.heldAnswers.WithLabelValues("failed").Add(float64(len(qs)))
		if !errors.Is(err, errNoIndexer) { // that one the readiness gauge shows
			s.log.Warn("FindResident failed; idle programs keep what the index last said they hold", "programs", len(qs), "err", err)
		}
		return
	}
	taken := 0
	s.mu.Lock()
	for i, q := range qs {
		a := resp.GetAnswers()[i]
		o := a.GetOverlap()
		if s.pipe.Held(q, turns.HoldingAnswer{Anchor: int(a.GetAnchor()), ChainBlocks: int(a.GetChainBlocks()), Stale: a.GetWorkerStale(),
			Overlap: routing.Overlap{Device: int(o.GetDeviceBlocks()), HostExt: int(o.GetHostExtensionBlocks()),
				DiskExt: int(o.GetDiskExtensionBlocks())}}) {
			taken++
		}
	}
	s.mu.Unlock()
	s.metrics.heldAnswers.WithLabelValues("taken").Add(float64(taken))
	s.metrics.heldAnswers.WithLabelValues("dropped").Add(float64(len(qs) - taken))
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
