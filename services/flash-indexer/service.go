package flashindexer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvfollow"
	"switchyard.dev/services/servicekit/kvwire"
)

// Limits on one FindMatches request, so a bad client cannot make one lookup
// cost unbounded memory.
const (
	maxQueryBlocks = 1 << 20
	maxBlockSize   = 1 << 16
)

// Service is the flash indexer.
type Service struct {
	flashindexv1.UnimplementedFlashIndexerServiceServer

	cfg  Config
	log  *slog.Logger
	m    *metrics
	dial func(target string) (*grpc.ClientConn, error)
	// dialAny connects to one of a list of replicas (the schedulers).
	dialAny func(list string) (*grpc.ClientConn, error)
	now     func() time.Time
	ix      *flashindex.Index
	// chains are recent hash queries' chains, for later queries' bases.
	chains *basecache.Chains

	// fresh and prober implement --stale-after (stale.go).
	fresh  *flashindex.Freshness
	prober *prober

	follower *kvfollow.Follower
	pool     *poolFollower // nil without --pool-addr
	// health reports whether the index has caught up with the fleet
	// (servicekit.CaughtUpService): schedulers ask only indexers that have.
	health *health.Server

	eventsApplied atomic.Uint64
	gaps          atomic.Uint64
	resyncs       atomic.Uint64
	// reloads: the snapshot loads in progress, for FindResident.
	reloads reloads
}

// New builds the service and registers its gRPC API and REST gateway on srv.
func New(cfg Config, srv *servicekit.Server) (*Service, error) {
	cfg = cfg.withDefaults()
	s := &Service{
		cfg:     cfg,
		log:     srv.Logger(),
		dial:    func(t string) (*grpc.ClientConn, error) { return srv.Dial(t) },
		dialAny: func(list string) (*grpc.ClientConn, error) { return srv.DialAny(list) },
		now:     time.Now,
		ix: flashindex.New(flashindex.Config{MaxBlocks: cfg.MaxBlocks,
			MaxPredictedBlocks: cfg.MaxPredictedBlocks}),
		fresh:  flashindex.NewFreshness(cfg.StaleAfter),
		chains: basecache.NewChains(cfg.ChainCacheHashes),
	}
	s.prober = newProber(s.fresh, func() time.Time { return s.now() },
		func(worker string) { s.follower.Resync(worker, resyncStale) }, s.announce)
	s.follower = kvfollow.New(kvfollow.Config{
		Backoff: cfg.Backoff,
		Dial:    s.dial,
		Logger:  s.log,
		OnResync: func(_, reason string) {
			s.m.resyncs.WithLabelValues(reason).Inc()
			s.resyncs.Add(1)
		},
		OnGap: func(string) {
			s.m.gaps.Inc()
			s.gaps.Add(1)
		},
		OnBatch:     func(string, int) { s.m.batches.Inc() },
		OnDuplicate: func(string) { s.m.skipped.Inc() },
		OnSubscribe: s.prober.subscribed,
		OnEnd:       s.prober.ended,
	}, indexSink{s})
	m, err := newMetrics(srv.Registry(), srv.MetricName, s.ix.Stats, s.follower.Followed,
		func() int { return s.fresh.Count(s.now()) })
	if err != nil {
		return nil, err
	}
	s.m = m
	if cfg.PoolAddr != "" {
		if s.pool, err = newPoolFollower(s, cfg.PoolAddr, srv.Registry(), srv.MetricName); err != nil {
			return nil, err
		}
	}
	flashindexv1.RegisterFlashIndexerServiceServer(srv, s)
	srv.Gateway(flashindexv1.RegisterFlashIndexerServiceHandler)
	s.health = srv.Health()
	s.health.SetServingStatus(servicekit.CaughtUpService, healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// reportCaughtUp tells the health service, within a caughtUpPoll of each
// change, whether the follower holds the whole fleet, until ctx ends.
func (s *Service) reportCaughtUp(ctx context.Context) {
	t := time.NewTicker(caughtUpPoll)
	defer t.Stop()
	was := false
	for {
		if now := s.follower.CaughtUp(); now != was {
			was = now
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if now {
				st = healthpb.HealthCheckResponse_SERVING
				s.log.Info("caught up with the fleet: answering lookups", "workers", s.follower.Followed())
			}
			s.health.SetServingStatus(servicekit.CaughtUpService, st)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// caughtUpPoll is how often the caught-up status is checked.
const caughtUpPoll = 20 * time.Millisecond

// Run follows the scheduler's worker set and every worker's KV events (and
// the shared pool's, with --pool-addr) until ctx is done, then stops every
// subscription and returns nil.
func (s *Service) Run(ctx context.Context) error {
	// Every scheduler replica holds the same worker set: any one will do.
	conn, err := s.dialAny(s.cfg.SchedulerAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if s.cfg.StaleAfter > 0 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.prober.run(ctx, s.cfg.probeInterval(), s.cfg.StaleAfter)
		}()
		defer func() { <-done }()
	}
	if s.pool != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.pool.run(ctx)
		}()
		defer func() { <-done }()
	}
	if s.health != nil {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.reportCaughtUp(rctx)
		}()
		defer func() { stop(); <-done }()
	}
	s.follower.Run(ctx, conn)
	return nil
}

// poolStale reports whether the shared pool's pages must not count as hits
// at now (pool.go): one atomic load.
func (s *Service) poolStale(now time.Time) bool { return s.pool != nil && s.pool.staleAt(now) }

// indexSink keeps the index in step with the worker streams kvfollow
// follows.
type indexSink struct{ s *Service }

// Apply applies a batch, unless the worker is stale: batches flow again
// after an outage, but what the outage lost is only in the snapshot, so that
// is reloaded instead.
func (x indexSink) Apply(worker string, events []kv.Event) {
	if x.s.fresh.Stale(worker, x.s.now()) {
		x.s.follower.Resync(worker, resyncStale)
		return
	}
	x.apply(worker, events)
	x.s.fresh.Applied(worker, x.s.now())
}

func (x indexSink) apply(worker string, events []kv.Event) {
	for _, ev := range events {
		x.s.apply(worker, ev)
	}
}

// Resync replaces the worker's entries with its snapshot; a stale worker's
// blocks count as hits again.
func (x indexSink) Resync(worker string, events []kv.Event) {
	x.s.reloads.begin(worker)
	defer x.s.reloads.end(worker)
	x.s.apply(worker, kv.Event{Kind: kv.Cleared})
	x.apply(worker, events)
	x.s.fresh.Resynced(worker, x.s.now())
}

func (x indexSink) Remove(worker string) {
	x.s.reloads.forget(worker)
	x.s.ix.RemoveWorker(worker)
	x.s.fresh.Removed(worker)
	x.s.prober.removed(worker)
}

// apply feeds one event into the index.
func (s *Service) apply(worker string, ev kv.Event) {
	if err := s.ix.Apply(worker, ev.DPRank, ev); err != nil {
		s.m.rejected.Inc()
		s.log.Debug("kv event refused", "worker", worker, "err", err)
		return
	}
	s.m.events.WithLabelValues(ev.Kind.String()).Inc()
	s.eventsApplied.Add(1)
}

// ---- gRPC API ------------------------------------------------------------

var (
	errNoQuery        = errors.New("query: block hashes or tokens are required")
	errQueryTooLong   = fmt.Errorf("query longer than %d blocks", maxQueryBlocks)
	errBlockSize      = fmt.Errorf("block_size above %d", maxBlockSize)
	errNoWorker       = errors.New("unknown worker")
	errNoWorkerID     = errors.New("worker_id is required")
	errBadTTL         = errors.New("ttl must be positive")
	errBadDPRank      = errors.New("dp_rank out of range")
	errTooManyQueries = fmt.Errorf("more than %d queries", maxResidentQueries)
	errTooManyAnchors = fmt.Errorf("more than %d anchors in a query", maxAnchors)
)

// errorCodes is the one table mapping errors to gRPC codes.
var errorCodes = servicekit.ErrorCodes{
	{Err: errNoQuery, Code: codes.InvalidArgument},
	{Err: errQueryTooLong, Code: codes.InvalidArgument},
	{Err: errBlockSize, Code: codes.InvalidArgument},
	{Err: errNoWorkerID, Code: codes.InvalidArgument},
	{Err: errBadTTL, Code: codes.InvalidArgument},
	{Err: errBadDPRank, Code: codes.InvalidArgument},
	{Err: errTooManyQueries, Code: codes.InvalidArgument},
	{Err: errTooManyAnchors, Code: codes.InvalidArgument},
	{Err: flashindex.ErrBadPrediction, Code: codes.InvalidArgument},
	{Err: errNoWorker, Code: codes.NotFound},
	{Err: basecache.ErrBaseNotHeld, Code: codes.NotFound},
}

func rpcError(err error) error { return errorCodes.Status(err) }

// queryHashes turns a request into block hashes; a query by hashes also
// into its whole chain, to keep (expanded from its base when it names one).
func (s *Service) queryHashes(req *flashindexv1.FindMatchesRequest) ([]kv.BlockHash, *basecache.Chain, error) {
	switch q := req.GetQuery().(type) {
	case *flashindexv1.FindMatchesRequest_Hashes:
		rest := q.Hashes.GetBlockHashes()
		if len(rest) > maxQueryBlocks {
			return nil, nil, errQueryTooLong
		}
		chain := basecache.Whole(rest)
		if b := q.Hashes.GetBase(); b != nil {
			var err error
			if chain, err = s.chains.Expand(b.GetKey(), int(b.GetBlocks()), rest); err != nil {
				s.m.bases.WithLabelValues("not_held").Inc()
				return nil, nil, err
			}
			s.m.bases.WithLabelValues("held").Inc()
			if len(chain.Hashes) > maxQueryBlocks {
				return nil, nil, errQueryTooLong
			}
		}
		return kvwire.Hashes(chain.Hashes), &chain, nil
	case *flashindexv1.FindMatchesRequest_Tokens:
		bs := int(q.Tokens.GetBlockSize())
		if bs == 0 {
			bs = s.cfg.BlockSize
		}
		if bs > maxBlockSize {
			return nil, nil, errBlockSize
		}
		if len(q.Tokens.GetTokenIds())/bs > maxQueryBlocks {
			return nil, nil, errQueryTooLong
		}
		h := kvhash.New(bs, q.Tokens.GetLoraName(), q.Tokens.GetCacheSalt())
		return h.Blocks(q.Tokens.GetTokenIds()), nil, nil
	}
	return nil, nil, errNoQuery
}

// FindMatches reports every worker's overlap with a prompt: the device
// prefix and the host, disk and shared extensions beyond it (shared is the
// run of shared-pool blocks right after the disk extension).
func (s *Service) FindMatches(_ context.Context, req *flashindexv1.FindMatchesRequest) (*flashindexv1.FindMatchesResponse, error) {
	hs, chain, err := s.queryHashes(req)
	if err != nil {
		return nil, rpcError(err)
	}
	now := s.now()
	t0 := time.Now()
	var m flashindex.Matches
	s.ix.FindMatchesWith(&m, hs, flashindex.FindOptions{Predicted: req.GetIncludePredicted(), Now: now, PoolStale: s.poolStale(now)})
	s.m.lookup.Observe(time.Since(t0).Seconds())

	if ids := req.GetWorkerIds(); len(ids) > 0 {
		only := make(map[string]bool, len(ids))
		for _, id := range ids {
			only[id] = true
		}
		m.Only(func(w string) bool { return only[w] })
	}
	// A worker whose event stream has been down past --stale-after may no
	// longer hold what the index says: it is left out, as a worker with
	// nothing cached would be, until its snapshot is reloaded. The shared
	// pool follows the same rule (PoolStale, above): no worker is credited
	// with its pages while its stream is stale.
	if stale := s.fresh.StaleAmong(matchedWorkers(&m), now); stale != nil {
		m.Only(func(w string) bool { return !stale[w] })
	}
	ws := m.Workers
	// Deepest first; ties by id so answers are stable.
	slices.SortFunc(ws, func(a, b flashindex.WorkerMatch) int {
		if a.Device != b.Device {
			return b.Device - a.Device
		}
		if c := strings.Compare(a.Worker, b.Worker); c != 0 {
			return c
		}
		return int(a.DPRank) - int(b.DPRank)
	})
	resp := &flashindexv1.FindMatchesResponse{QueryBlocks: uint32(len(hs))}
	if chain != nil && req.GetHashes().GetKeep() {
		resp.ChainKept = s.chains.Keep(*chain)
	}
	for _, w := range ws {
		resp.Overlaps = append(resp.Overlaps, overlapOf(w))
	}
	if req.GetIncludeFrequencies() {
		fs := m.Frequencies()
		resp.Frequencies = make([]uint32, len(fs))
		for i, f := range fs {
			resp.Frequencies[i] = uint32(f)
		}
	}
	return resp, nil
}

func matchedWorkers(m *flashindex.Matches) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, w := range m.Workers {
			if !yield(w.Worker) {
				return
			}
		}
	}
}

func overlapOf(w flashindex.WorkerMatch) *flashindexv1.WorkerOverlap {
	return &flashindexv1.WorkerOverlap{
		WorkerId:                 w.Worker,
		DpRank:                   w.DPRank,
		DeviceBlocks:             uint32(w.Device),
		HostExtensionBlocks:      uint32(w.Host),
		DiskExtensionBlocks:      uint32(w.Disk),
		SharedBeyondDeviceBlocks: uint32(w.Shared),
		PredictedDeviceBlocks:    uint32(w.Predicted),
	}
}

// Bounds on one FindResident request: each query walks a chain to its
// root for each anchor until one is known.
const (
	maxResidentQueries = 1 << 16
	maxAnchors         = 64
)

// FindResident answers, for each prompt named by its last block, what the
// named worker still holds of it (flashindex.Index.Resident).
func (s *Service) FindResident(_ context.Context, req *flashindexv1.FindResidentRequest) (*flashindexv1.FindResidentResponse, error) {
	qs := req.GetQueries()
	if len(qs) > maxResidentQueries {
		return nil, rpcError(errTooManyQueries)
	}
	for _, q := range qs {
		if q.GetWorkerId() == "" {
			return nil, rpcError(errNoWorkerID)
		}
		if len(q.GetAnchors()) > maxAnchors {
			return nil, rpcError(errTooManyAnchors)
		}
	}
	now := s.now()
	opt := flashindex.FindOptions{PoolStale: s.poolStale(now)}
	resp := &flashindexv1.FindResidentResponse{Answers: make([]*flashindexv1.ResidentAnswer, len(qs))}
	var m flashindex.Matches
	var chain []kv.BlockHash
	for i, q := range qs {
		var used int
		before := s.reloads.state(q.GetWorkerId())
		chain, used = s.ix.ResidentWith(&m, kvwire.Hashes(q.GetAnchors()), chain, opt)
		// A worker the index has no state of (not followed yet, or removed)
		// is one it cannot speak for, as a stale one; so is one whose
		// snapshot was being loaded meanwhile (reloads).
		a := &flashindexv1.ResidentAnswer{ChainBlocks: uint32(len(chain)), Anchor: uint32(max(used, 0)),
			WorkerStale: s.fresh.Stale(q.GetWorkerId(), now) || !s.ix.HasWorker(q.GetWorkerId()) ||
				unsettled(before, s.reloads.state(q.GetWorkerId()))}
		if w, found := m.Of(q.GetWorkerId()); found && !a.WorkerStale {
			a.Overlap = overlapOf(w)
		}
		resp.Answers[i] = a
	}
	return resp, nil
}

// GetStats reports the index's size and the event stream's health.
func (s *Service) GetStats(context.Context, *flashindexv1.GetStatsRequest) (*flashindexv1.GetStatsResponse, error) {
	st := s.ix.Stats()
	return &flashindexv1.GetStatsResponse{
		Workers:       uint32(st.Workers),
		Blocks:        uint64(st.Blocks),
		Entries:       uint64(st.TotalEntries()),
		EventsApplied: s.eventsApplied.Load(),
		Gaps:          s.gaps.Load(),
		Resyncs:       s.resyncs.Load(),
		// The limit is on distinct blocks (what memory scales with).
		MaxEntries:      uint64(st.MaxBlocks),
		FollowedWorkers: uint32(s.follower.Followed()),
		Predictions:     uint32(st.Predictions),
		PredictedBlocks: uint64(st.Predicted),
	}, nil
}

// PredictRoute records a routed prompt as provisionally held by its worker.
func (s *Service) PredictRoute(_ context.Context, req *flashindexv1.PredictRouteRequest) (*flashindexv1.PredictRouteResponse, error) {
	if req.GetWorkerId() == "" {
		return nil, rpcError(errNoWorkerID)
	}
	// first_block counts: a prediction past what any query can reach would
	// never be matched.
	if int64(req.GetFirstBlock())+int64(len(req.GetBlockHashes())) > maxQueryBlocks {
		return nil, rpcError(errQueryTooLong)
	}
	ttl := s.cfg.PredictTTL
	if req.GetTtl() != nil {
		if err := req.GetTtl().CheckValid(); err != nil {
			return nil, rpcError(fmt.Errorf("%w: %v", errBadTTL, err))
		}
		if ttl = req.GetTtl().AsDuration(); ttl <= 0 {
			return nil, rpcError(errBadTTL)
		}
	}
	ttl = min(ttl, s.cfg.PredictMaxTTL)
	// Only a worker of the fleet, and a rank it has: a prediction for any
	// other would show in lookups as an overlap that nobody holds. A worker
	// the scheduler has just registered may not be heard of here yet: its
	// prediction, only an optimisation, is then refused as not found.
	size, ok := s.follower.DPRanks(req.GetWorkerId())
	if !ok {
		return nil, rpcError(fmt.Errorf("%w %q", errNoWorker, req.GetWorkerId()))
	}
	if req.GetDpRank() >= size {
		return nil, rpcError(fmt.Errorf("%w: %d, worker %q has %d", errBadDPRank, req.GetDpRank(), req.GetWorkerId(), size))
	}
	if err := s.ix.Predict(s.now(), req.GetWorkerId(), req.GetDpRank(), int(req.GetFirstBlock()), kvwire.Hashes(req.GetBlockHashes()), ttl); err != nil {
		return nil, rpcError(err)
	}
	s.m.predictions.Inc()
	return &flashindexv1.PredictRouteResponse{}, nil
}

// DumpWorker returns a worker's blocks as Stored events that rebuild them.
func (s *Service) DumpWorker(_ context.Context, req *flashindexv1.DumpWorkerRequest) (*flashindexv1.DumpWorkerResponse, error) {
	id := req.GetWorkerId()
	if id == "" {
		return nil, rpcError(errNoWorkerID)
	}
	if !s.ix.HasWorker(id) {
		return nil, rpcError(fmt.Errorf("%w %q", errNoWorker, id))
	}
	resp := &flashindexv1.DumpWorkerResponse{WorkerId: id}
	for _, ev := range s.ix.Dump(id) {
		ev.Event.DPRank = ev.DPRank
		resp.Events = append(resp.Events, kvwire.EventToProto(ev.Event))
	}
	return resp, nil
}

// ---- metrics -------------------------------------------------------------

type metrics struct {
	events   *prometheus.CounterVec
	batches  prometheus.Counter
	skipped  prometheus.Counter
	rejected prometheus.Counter
	gaps     prometheus.Counter
	resyncs  *prometheus.CounterVec
	lookup   prometheus.Histogram

	predictions prometheus.Counter
	stale       prometheus.Counter
	bases       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, name func(string) string, stats func() flashindex.Stats, followed, stale func() int) (*metrics, error) {
	m := &metrics{
		events:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("events_applied_total"), Help: "KV events applied to the index, by kind."}, []string{"kind"}),
		batches:  prometheus.NewCounter(prometheus.CounterOpts{Name: name("batches_applied_total"), Help: "KV event batches applied."}),
		skipped:  prometheus.NewCounter(prometheus.CounterOpts{Name: name("batches_skipped_total"), Help: "Batches skipped as duplicates or already applied (replay overlap, out of order)."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: name("events_rejected_total"), Help: "KV events the index refused (invalid tier or kind)."}),
		gaps:     prometheus.NewCounter(prometheus.CounterOpts{Name: name("gaps_total"), Help: "Sequence gaps detected in a worker's event stream."}),
		resyncs:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("resyncs_total"), Help: "Snapshot reloads of a worker, by reason."}, []string{"reason"}),
		lookup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    name("lookup_duration_seconds"),
			Help:    "FindMatches time inside the index.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2.5, 14), // 1 µs .. ~150 ms
		}),
		predictions: prometheus.NewCounter(prometheus.CounterOpts{Name: name("predictions_total"), Help: "PredictRoute predictions recorded."}),
		stale:       prometheus.NewCounter(prometheus.CounterOpts{Name: name("stale_workers_total"), Help: "Times a worker's KV event stream stayed down past --stale-after, so its blocks stopped counting as hits."}),
		bases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("chain_bases_total"),
			Help: "FindMatches queries that named a chain base, by outcome (held, not_held: answered NOT_FOUND, the sender resent the whole chain)."}, []string{"outcome"}),
	}
	st := servicekit.StatsMetrics[flashindex.Stats]{Name: name, Stats: stats}
	if err := servicekit.RegisterMetrics(reg,
		m.events, m.batches, m.skipped, m.rejected, m.gaps, m.resyncs, m.lookup, m.predictions, m.stale, m.bases,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name("workers"), Help: "Workers whose KV events are followed."}, func() float64 { return float64(followed()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name("stale_workers"), Help: "Workers left out of FindMatches because their KV event stream has been down past --stale-after."}, func() float64 { return float64(stale()) }),
		st.Gauge("index_blocks", "Distinct KV blocks in the index.", func(s flashindex.Stats) float64 { return float64(s.Blocks) }),
		st.Gauge("index_entries", "(block, worker, dp rank, tier) entries in the index.", func(s flashindex.Stats) float64 { return float64(s.TotalEntries()) }),
		st.Gauge("index_bytes", "Estimated heap held by the index.", func(s flashindex.Stats) float64 { return float64(s.ApproxBytes) }),
		st.Gauge("index_max_blocks", "The configured block limit (--max-blocks).", func(s flashindex.Stats) float64 { return float64(s.MaxBlocks) }),
		st.Counter("block_events_total", "Blocks in applied Stored and Removed events.", func(s flashindex.Stats) float64 { return float64(s.BlockEvents) }),
		st.Counter("dropped_blocks_total", "Blocks refused because the index was full.", func(s flashindex.Stats) float64 { return float64(s.Dropped) }),
		st.Counter("duplicate_block_events_total", "Stores of held blocks and removals of absent ones (harmless, counted).", func(s flashindex.Stats) float64 { return float64(s.Duplicates) }),
		st.Gauge("predicted_blocks", "Blocks of live predict-on-route entries.", func(s flashindex.Stats) float64 { return float64(s.Predicted) }),
	); err != nil {
		return nil, err
	}
	return m, nil
}
