package kvhintemitter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	kvhintv1 "switchyard.dev/gen/switchyard/kvhint/v1"
	sessionindexv1 "switchyard.dev/gen/switchyard/sessionindex/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/sessionindex"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// ProtocolVersion is the KvHintEnvelope version this emitter speaks.
const ProtocolVersion = "0.1"

// Service is the KV hint emitter.
type Service struct {
	kvhintv1.UnimplementedKvHintEmitterServiceServer

	cfg  Config
	log  *slog.Logger
	m    *metrics
	dial func(target string) (*grpc.ClientConn, error)
	// dialAny connects to one of a list of replicas (the schedulers).
	dialAny func(list string) (*grpc.ClientConn, error)
	now     func() time.Time

	instance string        // random, so message ids stay unique across restarts
	msgSeq   atomic.Uint64 // per envelope

	programs chan programFeed // watchers → engine loop
	// sources is which scheduler replica each program was last heard from
	// (programFeed.source); the engine loop's alone.
	sources map[string]int
	removed chan string // worker ids that left

	wmu     sync.Mutex
	workers map[string]*worker

	imu      sync.Mutex // guards what the API reads
	policies []hints.PolicyInfo
	estats   hints.Stats
	totals   kvhintv1.GetStatsResponse
	recent   []*kvhintv1.SentHint // ring
	next     int
}

type worker struct {
	addr    string
	conn    *grpc.ClientConn
	client  enginev1.EngineShimServiceClient
	usage   float64
	known   bool          // usage reported
	support hints.Support // the hints its engine acts on, as it registered
}

// New builds the service and registers its gRPC API and REST gateway on srv.
func New(cfg Config, srv *servicekit.Server) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Hints.Validate(); err != nil {
		return nil, err
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	s := &Service{
		cfg:      cfg,
		log:      srv.Logger(),
		dial:     func(t string) (*grpc.ClientConn, error) { return srv.Dial(t) },
		dialAny:  func(l string) (*grpc.ClientConn, error) { return srv.DialAny(l) },
		now:      time.Now,
		instance: hex.EncodeToString(id[:]),
		programs: make(chan programFeed, 4096),
		sources:  map[string]int{},
		removed:  make(chan string, 64),
		workers:  map[string]*worker{},
		recent:   make([]*kvhintv1.SentHint, 0, cfg.RecentHints),
	}
	s.publish(hints.New(cfg.Hints))
	m, err := newMetrics(srv.Registry(), srv.MetricName, s.snapshot)
	if err != nil {
		return nil, err
	}
	s.m = m
	kvhintv1.RegisterKvHintEmitterServiceServer(srv, s)
	srv.Gateway(kvhintv1.RegisterKvHintEmitterServiceHandler)
	return s, nil
}

// Run watches the scheduler and runs the policies until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	// The worker set from whichever scheduler replica answers (they all
	// hold it); the programs from every replica (each owns its own).
	anySched, err := s.dialAny(s.cfg.SchedulerAddr)
	if err != nil {
		return err
	}
	defer anySched.Close()
	var scheds []*grpc.ClientConn
	defer func() {
		for _, c := range scheds {
			c.Close()
		}
	}()
	addrs := servicekit.SplitList(s.cfg.SchedulerAddr)
	for _, a := range addrs {
		c, err := s.dial(a)
		if err != nil {
			return err
		}
		scheds = append(scheds, c)
	}
	idx, err := s.dial(s.cfg.SessionIndexerAddr)
	if err != nil {
		return err
	}
	defer idx.Close()
	defer s.closeWorkers()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watchWorkers(ctx, anySched)
	}()
	for i, c := range scheds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.watchPrograms(ctx, c, i, addrs[i])
		}()
	}
	s.loop(ctx, sessionindexv1.NewSessionPrefixIndexerServiceClient(idx))
	wg.Wait()
	return nil
}

// loop owns the policy engine: lifecycle changes and worker removals come
// in through channels, decisions go out as envelopes.
func (s *Service) loop(ctx context.Context, idx sessionindexv1.SessionPrefixIndexerServiceClient) {
	engine := hints.New(s.cfg.Hints)
	v := &view{s: s, ctx: ctx, idx: idx}
	bv := batchView{v}
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-s.removed:
			engine.WorkerRemoved(id)
			continue
		case f := <-s.programs:
			s.observe(engine, f)
			// Take whatever else is queued before deciding once.
			for more := true; more; {
				select {
				case f := <-s.programs:
					s.observe(engine, f)
				default:
					more = false
				}
			}
		case <-tick.C:
		}
		v.failed = nil // a new round tries the indexer again
		// One batched lineage read per round, unless the indexer cannot
		// answer it (older than GetSessionLineages, or the mesh's
		// allow-list lacks it): then one read per lookup for a while.
		var round hints.View = bv
		if time.Now().Before(v.batchRetry) {
			round = v
		}
		actions := engine.Decide(s.now(), round)
		for _, o := range s.send(ctx, actions) {
			engine.Outcome(o.action, o.result)
		}
		s.publish(engine)
	}
}

// observe applies one message of the program watch to the engine.
func (s *Service) observe(engine *hints.Engine, f programFeed) {
	if f.live == nil {
		id := f.program.Session
		if f.program.Lifecycle == hints.LifecycleTerminated {
			delete(s.sources, id)
		} else {
			s.sources[id] = f.source
		}
		engine.Observe(s.now(), f.program)
		return
	}
	// The programs of the other replicas stay.
	live := maps.Clone(f.live)
	for id, src := range s.sources {
		switch {
		case src != f.source:
			live[id] = true
		case !live[id]:
			delete(s.sources, id)
		}
	}
	if n := engine.Resync(live); n > 0 {
		s.log.Info("forgot programs the scheduler no longer holds", "count", n, "scheduler", f.source)
	}
}

// publish copies what the API and metrics read out of the engine.
func (s *Service) publish(e *hints.Engine) {
	p, st := e.Policies(), e.Stats()
	s.imu.Lock()
	s.policies, s.estats = p, st
	s.totals.Throttled, s.totals.Unsupported = st.Throttled, st.Unsupported
	s.imu.Unlock()
}

type snapshotView struct {
	stats  hints.Stats
	totals *kvhintv1.GetStatsResponse
}

func (s *Service) snapshot() snapshotView {
	s.imu.Lock()
	defer s.imu.Unlock()
	t := &kvhintv1.GetStatsResponse{Sent: s.totals.Sent, Accepted: s.totals.Accepted, Clipped: s.totals.Clipped, Deferred: s.totals.Deferred,
		Rejected: s.totals.Rejected, Throttled: s.totals.Throttled, Errors: s.totals.Errors, Unsupported: s.totals.Unsupported}
	return snapshotView{stats: s.estats, totals: t}
}

type outcome struct {
	action hints.Action
	result hints.Result
}

// send delivers one envelope per worker, all workers at once, and records
// every answer.
func (s *Service) send(ctx context.Context, actions []hints.Action) []outcome {
	if len(actions) == 0 {
		return nil
	}
	byWorker := map[string][]hints.Action{}
	for _, a := range actions {
		byWorker[a.Worker] = append(byWorker[a.Worker], a)
	}
	ids := make([]string, 0, len(byWorker))
	for w := range byWorker {
		ids = append(ids, w)
	}
	sort.Strings(ids)
	var (
		mu  sync.Mutex
		out []outcome
		wg  sync.WaitGroup
	)
	for _, w := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := s.sendWorker(ctx, w, byWorker[w])
			mu.Lock()
			out = append(out, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (s *Service) sendWorker(ctx context.Context, w string, actions []hints.Action) []outcome {
	msgID := fmt.Sprintf("%s-%d", s.instance, s.msgSeq.Add(1))
	env := &kvv1.KvHintEnvelope{ProtocolVersion: ProtocolVersion, MessageId: msgID}
	for i, a := range actions {
		env.Actions = append(env.Actions, actionToProto(fmt.Sprintf("%s/%d", msgID, i), a))
	}
	s.wmu.Lock()
	wk := s.workers[w]
	s.wmu.Unlock()
	answers := map[string]*kvv1.KvHintOutcome{}
	var callErr error
	if wk == nil {
		callErr = status.Error(codes.Unavailable, "worker not known")
	} else {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
		start := time.Now()
		resp, err := wk.client.ApplyKvHints(cctx, &enginev1.ApplyKvHintsRequest{Envelope: env})
		cancel()
		s.m.apply.Observe(time.Since(start).Seconds())
		callErr = err
		for _, o := range resp.GetOutcomes() {
			answers[o.GetActionId()] = o
		}
	}
	if callErr != nil && ctx.Err() == nil {
		s.log.Warn("apply kv hints", "worker", w, "message_id", msgID, "err", callErr)
	}
	now := s.now()
	out := make([]outcome, len(actions))
	s.imu.Lock()
	defer s.imu.Unlock()
	for i, a := range actions {
		pa := env.Actions[i]
		o := answers[pa.GetActionId()]
		r := hints.ResultError
		label := "error"
		s.totals.Sent++
		switch {
		case callErr != nil:
			o = &kvv1.KvHintOutcome{ActionId: pa.GetActionId(), Reason: status.Convert(callErr).Message()}
			s.totals.Errors++
		case o == nil:
			o = &kvv1.KvHintOutcome{ActionId: pa.GetActionId(), Result: kvv1.HintResult_HINT_RESULT_REJECTED, Reason: "engine gave no answer"}
			fallthrough
		default:
			r = resultFromProto(o.GetResult())
			switch r {
			case hints.ResultAccepted:
				s.totals.Accepted++
				label = "accepted"
			case hints.ResultClipped:
				s.totals.Clipped++
				label = "clipped"
			case hints.ResultDeferred:
				s.totals.Deferred++
				label = "deferred"
			default:
				s.totals.Rejected++
				label = "rejected"
			}
		}
		s.m.hints.WithLabelValues(a.Policy, a.Kind.String(), label).Inc()
		out[i] = outcome{action: a, result: r}
		s.record(&kvhintv1.SentHint{Time: timestamppb.New(now), WorkerId: w, Policy: a.Policy, Action: pa, Outcome: o})
	}
	return out
}

// record appends to the ring of recent hints; imu held.
func (s *Service) record(h *kvhintv1.SentHint) {
	if len(s.recent) < cap(s.recent) {
		s.recent = append(s.recent, h)
		return
	}
	s.recent[s.next] = h
	s.next = (s.next + 1) % len(s.recent)
}

// view serves lineage from the session-prefix indexer, and load and hint
// support from the worker set, for the policies. As a plain hints.View it
// reads one lineage per lookup (GetSessionLineage); batchView reads a
// round's in one call.
type view struct {
	s   *Service
	ctx context.Context
	idx sessionindexv1.SessionPrefixIndexerServiceClient
	// failed ends a round's lookups at the first failure, so a hung
	// indexer costs one timeout per round, not one per program.
	failed error
	// batchRetry: until then the indexer is read one lookup at a time (it
	// refused GetSessionLineages). Wall clock: it paces RPCs, not policies.
	batchRetry time.Time
}

var (
	_ hints.SupportView = (*view)(nil)
	_ hints.BatchView   = batchView{}
)

func (v *view) Lineage(session, worker string) ([]sessionindex.Chain, error) {
	if v.failed != nil {
		return nil, v.failed
	}
	ctx, cancel := context.WithTimeout(v.ctx, v.s.cfg.LineageTimeout)
	defer cancel()
	resp, err := v.idx.GetSessionLineage(ctx, &sessionindexv1.GetSessionLineageRequest{SessionId: session, WorkerId: worker})
	if status.Code(err) == codes.NotFound {
		return nil, nil // the indexer never saw it: nothing to name
	}
	if err != nil {
		v.failed = err
		return nil, err
	}
	return chainsFromProto(resp.GetLineages()), nil
}

func (v *view) KVUsage(worker string) (float64, bool) {
	v.s.wmu.Lock()
	defer v.s.wmu.Unlock()
	if w := v.s.workers[worker]; w != nil && w.known {
		return w.usage, true
	}
	return 0, false
}

// HintSupport is what the worker announced when it registered; unknown for
// a worker not heard of (its hints fail, and are retried, anyway).
func (v *view) HintSupport(worker string) hints.Support {
	v.s.wmu.Lock()
	defer v.s.wmu.Unlock()
	if w := v.s.workers[worker]; w != nil {
		return w.support
	}
	return hints.Support{}
}

// batchView is the view whose lineage comes from GetSessionLineages: every
// lookup of a round in one call (LineageBatch queries per call), each chain
// with the indexer's shared count.
type batchView struct{ *view }

func (v batchView) Lineages(qs []hints.LineageQuery) ([][]sessionindex.Chain, error) {
	out := make([][]sessionindex.Chain, 0, len(qs))
	limit := v.s.cfg.LineageBatch
	var unknown []int
	for len(qs) > 0 {
		n := min(len(qs), limit)
		req := &sessionindexv1.GetSessionLineagesRequest{Queries: make([]*sessionindexv1.LineageQuery, n)}
		for i, q := range qs[:n] {
			req.Queries[i] = &sessionindexv1.LineageQuery{SessionId: q.Session, WorkerId: q.Worker}
		}
		ctx, cancel := context.WithTimeout(v.ctx, v.s.cfg.LineageTimeout)
		resp, err := v.idx.GetSessionLineages(ctx, req)
		cancel()
		if c := status.Code(err); c == codes.Unimplemented || c == codes.PermissionDenied {
			// The round waits (its lineage would lack shared counts); the
			// next ones read per lookup, and compare chains themselves.
			v.batchRetry = time.Now().Add(batchRetryAfter)
			v.s.log.Warn("session-prefix indexer refused GetSessionLineages; reading lineage one lookup at a time",
				"indexer", v.s.cfg.SessionIndexerAddr, "retry_in", batchRetryAfter, "err", err)
			return nil, err
		}
		if status.Code(err) == codes.ResourceExhausted {
			if n > 1 {
				// The answer outgrew a message (long, branched lineages):
				// the rest of the round asks for half as many at a time.
				limit = n / 2
				continue
			}
			// One session's lineage alone: it is unknown this round (its
			// policies decide again next round), not the whole round
			// failed for it; the rest go in whole batches again.
			v.s.log.Warn("a session's lineage does not fit one message; no hints for it this round",
				"session", qs[0].Session, "worker", qs[0].Worker)
			unknown = append(unknown, len(out))
			out = append(out, nil)
			qs, limit = qs[1:], v.s.cfg.LineageBatch
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(resp.GetResults()) != n {
			return nil, fmt.Errorf("indexer answered %d of %d lineage queries", len(resp.GetResults()), n)
		}
		for _, r := range resp.GetResults() {
			out = append(out, chainsFromProto(r.GetLineages()))
		}
		qs = qs[n:]
	}
	if len(unknown) > 0 {
		return out, &hints.UnknownLineages{Indexes: unknown}
	}
	return out, nil
}

// batchRetryAfter is how long the emitter reads lineage per lookup after
// the indexer refused a batched read.
const batchRetryAfter = time.Minute

// chainsFromProto decodes lineages. GetSessionLineage's carry no shared
// count: only a plain view reads them, and then the policies compare chains.
func chainsFromProto(ls []*sessionindexv1.Lineage) []sessionindex.Chain {
	var out []sessionindex.Chain
	for _, l := range ls {
		out = append(out, sessionindex.Chain{Worker: l.GetWorkerId(), Blocks: kvwire.Hashes(l.GetBlockHashes()), Shared: int(l.GetSharedBlocks())})
	}
	return out
}

// ---- gRPC API ------------------------------------------------------------

// ListPolicies lists every policy with what it has sent.
func (s *Service) ListPolicies(context.Context, *kvhintv1.ListPoliciesRequest) (*kvhintv1.ListPoliciesResponse, error) {
	s.imu.Lock()
	defer s.imu.Unlock()
	resp := &kvhintv1.ListPoliciesResponse{}
	for _, p := range s.policies {
		resp.Policies = append(resp.Policies, &kvhintv1.Policy{Name: p.Name, Description: p.Description, Enabled: p.Enabled, HintsSent: p.Sent})
	}
	return resp, nil
}

// ListRecentHints returns the latest hints, newest first.
func (s *Service) ListRecentHints(_ context.Context, req *kvhintv1.ListRecentHintsRequest) (*kvhintv1.ListRecentHintsResponse, error) {
	limit := servicekit.ListLimit(req.GetLimit())
	s.imu.Lock()
	defer s.imu.Unlock()
	resp := &kvhintv1.ListRecentHintsResponse{}
	n := len(s.recent)
	for i := 0; i < n && i < limit; i++ {
		// While the ring fills the newest is last; once full, just before next.
		j := n - 1 - i
		if n == cap(s.recent) {
			j = (s.next - 1 - i + 2*n) % n
		}
		resp.Hints = append(resp.Hints, s.recent[j])
	}
	return resp, nil
}

// GetStats reports totals by outcome.
func (s *Service) GetStats(context.Context, *kvhintv1.GetStatsRequest) (*kvhintv1.GetStatsResponse, error) {
	return s.snapshot().totals, nil
}

// ---- metrics -------------------------------------------------------------

type metrics struct {
	hints *prometheus.CounterVec
	apply prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, name func(string) string, snap func() snapshotView) (*metrics, error) {
	m := &metrics{
		hints: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("hints_total"), Help: "Hint actions sent, by policy, action and engine outcome."}, []string{"policy", "action", "outcome"}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("apply_seconds"), Help: "Latency of ApplyKvHints calls to shims.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}),
	}
	st := servicekit.StatsMetrics[snapshotView]{Name: name, Stats: snap}
	if err := servicekit.RegisterMetrics(reg,
		m.hints, m.apply,
		st.Counter("throttled_total", "Hint actions held back by a worker's rate limit or block budget.",
			func(v snapshotView) float64 { return float64(v.stats.Throttled) }),
		st.Counter("unsupported_total", "Hint actions not sent: the worker's engine acts on nothing near them.",
			func(v snapshotView) float64 { return float64(v.stats.Unsupported) }),
		st.Counter("lineage_errors_total", "Lineage lookups that failed (the decision waits for the next round).",
			func(v snapshotView) float64 { return float64(v.stats.LineageFails) }),
		st.Gauge("programs", "Programs the policies track.",
			func(v snapshotView) float64 { return float64(v.stats.Programs) }),
		st.Gauge("long_tool_call_threshold_seconds", "Median recent tool-call time (the default until enough were seen; tool calls are timed only while demote_long_tool_call is on).",
			func(v snapshotView) float64 { return v.stats.MedianTool.Seconds() }),
	); err != nil {
		return nil, err
	}
	return m, nil
}
