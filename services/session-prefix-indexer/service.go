package sessionindexer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvfollow"
	"switchyard.dev/services/servicekit/kvwire"
)

// Service is the session-prefix indexer.
type Service struct {
	sessionindexv1.UnimplementedSessionPrefixIndexerServiceServer

	cfg  Config
	log  *slog.Logger
	m    *metrics
	dial func(target string) (*grpc.ClientConn, error)
	// dialAny connects to one of a list of replicas (the schedulers).
	dialAny func(list string) (*grpc.ClientConn, error)
	now     func() time.Time

	mu  sync.Mutex // guards idx and pending: the core is single-threaded
	idx *sessionindex.Index
	// pending holds route-decision hits, per worker, whose block the
	// worker's KV events have not made resident here yet.
	pending map[string][]match

	follower *kvfollow.Follower
}

// New builds the service and registers its gRPC API and REST gateway on srv.
func New(cfg Config, srv *servicekit.Server) (*Service, error) {
	cfg = cfg.withDefaults()
	s := &Service{
		cfg:     cfg,
		log:     srv.Logger(),
		dial:    func(t string) (*grpc.ClientConn, error) { return srv.Dial(t) },
		dialAny: func(l string) (*grpc.ClientConn, error) { return srv.DialAny(l) },
		now:     time.Now,
		idx:     sessionindex.New(sessionindex.Config{MaxSessions: cfg.MaxSessions}),
		pending: map[string][]match{},
	}
	s.follower = kvfollow.New(kvfollow.Config{
		Backoff:  cfg.Backoff,
		Dial:     func(addr string) (*grpc.ClientConn, error) { return s.dial(addr) },
		Logger:   s.log,
		OnResync: func(_, reason string) { s.m.resyncs.WithLabelValues(reason).Inc() },
		OnBatch:  func(string, int) { s.m.batches.Inc() },
	}, lineageSink{s})
	m, err := newMetrics(srv.Registry(), srv.MetricName, s.stats, s.follower.Followed)
	if err != nil {
		return nil, err
	}
	s.m = m
	sessionindexv1.RegisterSessionPrefixIndexerServiceServer(srv, s)
	srv.Gateway(registerGateway)
	return s, nil
}

func (s *Service) stats() sessionindex.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.Stats()
}

// Run follows the scheduler's worker set and each worker's KV events until
// ctx is done, then stops every subscription and returns nil.
func (s *Service) Run(ctx context.Context) error {
	// The worker set from whichever scheduler replica answers (they all
	// hold it); programs and routes from every replica (each decides for
	// its own sessions).
	anySched, err := s.dialAny(s.cfg.SchedulerAddr)
	if err != nil {
		return err
	}
	defer anySched.Close()
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, addr := range servicekit.SplitList(s.cfg.SchedulerAddr) {
		conn, err := s.dial(addr)
		if err != nil {
			return err
		}
		conns = append(conns, conn)
	}
	var wg sync.WaitGroup
	for _, conn := range conns {
		for _, w := range []struct {
			on    bool
			watch func(context.Context, *grpc.ClientConn)
		}{{s.cfg.WatchPrograms, s.watchPrograms}, {s.cfg.WatchRoutes, s.watchRoutes}} {
			if w.on {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.watch(ctx, conn)
				}()
			}
		}
	}
	s.follower.Run(ctx, anySched)
	wg.Wait()
	return nil
}

// lineageSink feeds the worker streams kvfollow follows into the core.
type lineageSink struct{ s *Service }

func (l lineageSink) Apply(worker string, events []kv.Event)  { l.s.apply(worker, events) }
func (l lineageSink) Resync(worker string, events []kv.Event) { l.s.resync(worker, events) }
func (l lineageSink) Remove(worker string)                    { l.s.clearWorker(worker) }

// apply feeds one worker's events into the core under the lock.
func (s *Service) apply(worker string, events []kv.Event) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range events {
		s.m.events.WithLabelValues(ev.Kind.String()).Inc()
		if err := s.idx.Apply(worker, ev, now); err != nil {
			s.m.rejected.Inc()
			s.log.Debug("lineage update refused", "worker", worker, "err", err)
		}
	}
	s.retryMatches(worker, now)
}

func (s *Service) resync(worker string, events []kv.Event) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.idx.Resync(worker, events, now); err != nil {
		s.log.Debug("lineage updates refused in snapshot", "worker", worker, "err", err)
	}
	s.retryMatches(worker, now)
}

func (s *Service) clearWorker(worker string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idx.ClearWorker(worker)
	delete(s.pending, worker)
}

// ---- gRPC API ------------------------------------------------------------

// errorCodes is the one table mapping core errors to gRPC codes.
var errorCodes = servicekit.ErrorCodes{
	{Err: errNoSession, Code: codes.NotFound},
	{Err: errBadRequest, Code: codes.InvalidArgument},
	{Err: errTooManyQueries, Code: codes.InvalidArgument},
	{Err: sessionindex.ErrInvalid, Code: codes.InvalidArgument},
	{Err: errNotCaughtUp, Code: codes.Unavailable},
}

var (
	errNoSession  = errors.New("unknown session")
	errBadRequest = errors.New("session_id is required")
	// errTooManyQueries: more than MaxLineageQueries in one call.
	errTooManyQueries = errors.New("too many lineage queries")
	errNotCaughtUp    = errors.New("not caught up with the workers' KV events yet: lineage may be missing")
)

// caughtUp reports whether lineage reads may be answered: the worker set
// was heard and every worker's snapshot loaded (kvfollow). Before that, a
// session the index does not know may simply not be loaded yet, and "not
// found" would tell the hint emitter there is nothing to demote or bring
// back, which it does not ask again; UNAVAILABLE makes it ask next round.
func (s *Service) caughtUp() error {
	if !s.follower.CaughtUp() {
		return rpcError(errNotCaughtUp)
	}
	return nil
}

func rpcError(err error) error { return errorCodes.Status(err) }

// GetSessionLineage returns a session's chains; NOT_FOUND for a session the
// index does not know (never seen, or forgotten by the LRU cap).
func (s *Service) GetSessionLineage(_ context.Context, req *sessionindexv1.GetSessionLineageRequest) (*sessionindexv1.GetSessionLineageResponse, error) {
	if req.GetSessionId() == "" {
		return nil, rpcError(errBadRequest)
	}
	if err := s.caughtUp(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	sum, ok := s.idx.Session(req.GetSessionId())
	chains := s.idx.Lineage(req.GetSessionId(), req.GetWorkerId())
	s.mu.Unlock()
	if !ok {
		return nil, rpcError(errNoSession)
	}
	resp := &sessionindexv1.GetSessionLineageResponse{SessionId: sum.ID, ParentSessionId: sum.Parent}
	for _, c := range chains {
		resp.Lineages = append(resp.Lineages, &sessionindexv1.Lineage{WorkerId: c.Worker, BlockHashes: kvwire.Uint64s(c.Blocks)})
	}
	return resp, nil
}

// ListSessions lists sessions, most recently touched first.
func (s *Service) ListSessions(_ context.Context, req *sessionindexv1.ListSessionsRequest) (*sessionindexv1.ListSessionsResponse, error) {
	s.mu.Lock()
	sums := s.idx.Sessions(servicekit.ListLimit(req.GetLimit()))
	s.mu.Unlock()
	resp := &sessionindexv1.ListSessionsResponse{}
	for _, sum := range sums {
		resp.Sessions = append(resp.Sessions, &sessionindexv1.SessionSummary{
			SessionId:       sum.ID,
			ParentSessionId: sum.Parent,
			WorkerIds:       sum.Workers,
			Frontiers:       uint32(sum.Frontiers),
			MaxDepth:        uint32(sum.MaxDepth),
			LastTouch:       timestamppb.New(sum.LastTouch),
		})
	}
	return resp, nil
}

// GetStats reports the index's size and counters.
func (s *Service) GetStats(context.Context, *sessionindexv1.GetStatsRequest) (*sessionindexv1.GetStatsResponse, error) {
	st := s.stats()
	return &sessionindexv1.GetStatsResponse{
		Sessions:        uint32(st.Sessions),
		Nodes:           uint64(st.Nodes),
		Frontiers:       uint64(st.Frontiers),
		EventsApplied:   st.EventsApplied,
		RejectedUpdates: st.RejectedUpdates,
		EvictedSessions: st.EvictedSessions,
	}, nil
}

// ---- metrics -------------------------------------------------------------

type metrics struct {
	events   *prometheus.CounterVec
	batches  prometheus.Counter
	rejected prometheus.Counter
	resyncs  *prometheus.CounterVec
	matches  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, name func(string) string, stats func() sessionindex.Stats, followed func() int) (*metrics, error) {
	m := &metrics{
		events:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("kv_events_total"), Help: "KV events consumed, by kind."}, []string{"kind"}),
		batches:  prometheus.NewCounter(prometheus.CounterOpts{Name: name("kv_batches_total"), Help: "KV event batches consumed."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: name("rejected_updates_total"), Help: "Lineage updates refused (unknown or conflicting parent, cycle)."}),
		resyncs:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("resyncs_total"), Help: "Snapshot reloads of a worker, by reason."}, []string{"reason"}),
		matches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("route_matches_total"),
			Help: "Route-decision prefix hits, by result: applied, applied_late (after the worker's events caught up), expired, dropped (backlog full)."}, []string{"result"}),
	}
	st := servicekit.StatsMetrics[sessionindex.Stats]{Name: name, Stats: stats}
	if err := servicekit.RegisterMetrics(reg,
		m.events, m.batches, m.rejected, m.resyncs, m.matches,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name("workers"), Help: "Workers whose KV events are followed."}, func() float64 { return float64(followed()) }),
		st.Gauge("sessions", "Sessions tracked.", func(s sessionindex.Stats) float64 { return float64(s.Sessions) }),
		st.Gauge("nodes", "Logical blocks in the lineage forest.", func(s sessionindex.Stats) float64 { return float64(s.Nodes) }),
		st.Gauge("frontiers", "Session frontiers (chain tips) across workers.", func(s sessionindex.Stats) float64 { return float64(s.Frontiers) }),
		st.Counter("evicted_sessions_total", "Sessions forgotten by the LRU cap.", func(s sessionindex.Stats) float64 { return float64(s.EvictedSessions) }),
	); err != nil {
		return nil, err
	}
	return m, nil
}
