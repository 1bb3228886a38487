package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/turns"
)

// maxExcludeWorkers bounds RouteRequest.exclude_workers.
const maxExcludeWorkers = 256

// Route picks the worker for one turn: per-worker overlap from the flash
// indexer, admission control when the policy is session_aware (the call
// blocks, within the caller's deadline, while the program is paused), then
// the routing core's cost function among the workers the turn does not
// exclude (UNAVAILABLE when it excludes every live one).
func (s *Service) Route(ctx context.Context, req *schedulerv1.RouteRequest) (*schedulerv1.RouteResponse, error) {
	if req.GetRequestId() == "" {
		return nil, toStatus(invalid("request_id is required"))
	}
	// A turn is moved at most a few times (the frontend's
	// --migration-limit); the exclusion is checked against every candidate
	// under the lock, so a list of millions would hold all routing up.
	if n := len(req.GetExcludeWorkers()); n > maxExcludeWorkers {
		return nil, toStatus(invalid("exclude_workers lists %d workers; at most %d", n, maxExcludeWorkers))
	}
	if err := checkIDs(req.GetRequestId(), "", req.GetAgent()); err != nil {
		return nil, toStatus(err)
	}
	if s.peers != nil && !s.peers.caughtUp.Load() {
		return nil, status.Error(codes.Unavailable, "scheduler replica is catching up with its peers' workers")
	}
	chain, lookup, err := s.wholeChain(req)
	if err != nil {
		return nil, toStatus(err)
	}
	policy := s.cfg.Routing.Policy
	if p := req.GetPolicy(); p != "" {
		if policy, err = routing.ParsePolicy(p); err != nil {
			return nil, toStatus(invalid("%v", err))
		}
	}
	agent := req.GetAgent()
	key := admission.Key{Tenant: agent.GetTenant(), SessionID: agent.GetSessionId()}
	blockSize := int(req.GetBlockSize())
	if blockSize <= 0 {
		blockSize = s.cfg.Routing.BlockSize
	}
	isl := int(req.GetPromptTokens())
	if isl == 0 {
		isl = len(req.GetBlockHashes()) * blockSize
	}
	turn := turns.Turn{
		RequestID:       req.GetRequestId(),
		Key:             key,
		ParentSessionID: agent.GetParentSessionId(),
		PromptTokens:    isl,
		Blocks:          len(req.GetBlockHashes()),
		BlockSize:       blockSize,
		Final:           agent.GetSessionFinal(),
		Policy:          policy,
		// A migrated turn (its attempts failed there before the first
		// token) goes anywhere else, pin or binding notwithstanding.
		Exclude:   req.GetExcludeWorkers(),
		Continued: req.GetContinued(),
	}
	if s.pipe.NeedsAnchors(&turn) {
		turn.Anchors = turns.Anchors(req.GetBlockHashes())
	}

	// The session's previous turn first, when its finish is still on its
	// way (predecessors.go).
	if prev := s.preds.extended(turn.RequestID, key, isl, req.GetBlockHashes()); len(prev) > 0 {
		outcome := "finished"
		if !s.preds.await(ctx, s.stop, prev) {
			outcome = "gave_up"
		}
		s.metrics.predecessorWaits.WithLabelValues(outcome).Inc()
	}

	started := time.Now()
	buf := routeBufs.Get().(*routeBuf)
	defer routeBufs.Put(buf)
	workers, err := s.snapshot(ctx, req, lookup, policy, buf)
	if err != nil {
		return nil, toStatus(err)
	}

	// Admission: a turn of a paused program (or a new program queued behind
	// paused ones) waits here for the tick that resumes it.
	adm, waited, err := s.admit(ctx, turn)
	if err != nil {
		return nil, toStatus(err)
	}
	if waited > 0 {
		// Minutes may have passed: the fleet and its caches moved on.
		started = time.Now()
		lookup = lookup.again(req.GetBlockHashes(), buf.indexerKept)
		if workers, err = s.snapshot(ctx, req, lookup, policy, buf); err != nil {
			s.mu.Lock()
			s.publish(s.pipe.Cancel(s.now(), turn))
			s.mu.Unlock()
			return nil, toStatus(err)
		}
	}

	cands := candidates(buf)
	now := s.now()
	s.mu.Lock()
	if err := ctx.Err(); err != nil {
		// The caller left while the route waited (for a predecessor, for
		// admission): nobody would start or finish a turn placed now, and
		// its load and program would stay until the stale sweep.
		s.publish(s.pipe.Cancel(now, turn))
		s.mu.Unlock()
		return nil, toStatus(err)
	}
	d, err := s.pipe.Place(now, turn, adm, cands)
	s.publish(d.Events)
	if err != nil {
		s.mu.Unlock()
		s.preds.finished(turn.RequestID) // an earlier attempt of it, which Place ended
		return nil, toStatus(err)
	}
	scores := scoresToProto(d.Scores, d.Chosen, s.cfg.RouteScores)
	matched := d.ChosenScore().Overlap.Device
	// Under the lock, as forgetWorker drops a departed worker's series: a
	// count after it would make them again for a worker that is gone.
	s.metrics.routes.WithLabelValues(string(policy), d.Worker, string(d.Reason)).Inc()
	s.mu.Unlock()
	s.preds.routed(turn.RequestID, key, isl, req.GetBlockHashes())
	// The chosen worker's real device prefix, predictions aside, and the
	// DP rank that holds it: the prediction is of that rank, so that its
	// base is judged against the prefix it was cut at.
	held, rank := 0, uint32(0)
	if i := buf.view.Index(d.Worker); i >= 0 {
		held, rank = buf.overlaps[i].Device-buf.predicted[i], buf.rank[i]
	}

	s.metrics.routeSeconds.Observe(time.Since(started).Seconds())
	if s.pipe.Admitted(&turn) {
		s.metrics.admissionWait.Observe(waited.Seconds())
	}
	if s.decisionSubs.active() {
		s.decisionSubs.publish(routeDecision(req, d.Worker, d.Reason, matched, now))
	}
	if s.cfg.PredictOnRouteTTL > 0 && policy.UsesKV() {
		s.predictRoute(ctx, req, d.Worker, rank, held)
	}
	var addr string
	if i := buf.view.Index(d.Worker); i >= 0 {
		addr = workers[i].Address
	}
	var chainKept uint64
	if lookup.keep {
		chain.Tag = buf.indexerKept
		chainKept = s.chains.Keep(chain)
	}
	return &schedulerv1.RouteResponse{
		ChainKept:        chainKept,
		WorkerId:         d.Worker,
		WorkerAddress:    addr,
		Policy:           string(policy),
		Scores:           scores,
		AdmissionWait:    durationOrZero(waited),
		PriorityJump:     adm.PriorityJump,
		Priority:         d.Priority,
		RetentionSeconds: uint32(d.Retain / time.Second),
	}, nil
}

// chainLookup is how a route's FindMatches carries its chain: past base
// to the flash indexer that kept the session's previous chain (holder, an
// index of the indexers' list; -1: none known), whole to any other; keep
// asks the indexer to keep it for the session's next turn (and the
// scheduler keeps it too).
type chainLookup struct {
	base   *kvv1.ChainBase
	holder int
	keep   bool
}

// again is the lookup of a route's second snapshot, after an admission
// wait: the indexer that kept the chain at the first (kept, its index + 1;
// 0: none) is named the chain itself as its base, whole, and sent no
// hashes. Sent whole again it would count a second holder, and the chain
// would outlive the next turn's, which supersedes it once.
func (l chainLookup) again(chain []uint64, kept int) chainLookup {
	l.base, l.holder = nil, -1
	if kept > 0 && len(chain) > 0 {
		l.base, l.holder = &kvv1.ChainBase{Key: chain[len(chain)-1], Blocks: uint32(len(chain))}, kept-1
	}
	return l
}

// wholeChain makes req's block hashes the prompt's whole chain, expanding
// them after the base req names (which is then dropped from req: whatever
// reads req below sees the whole chain), and returns the chain to keep for
// the session's next route and how to look it up. Only a session's turns
// that are not its last are kept: nothing names the others' chains again.
func (s *Service) wholeChain(req *schedulerv1.RouteRequest) (basecache.Chain, chainLookup, error) {
	agent := req.GetAgent()
	lookup := chainLookup{holder: -1, keep: agent.GetSessionId() != "" && !agent.GetSessionFinal()}
	b := req.GetBase()
	if b == nil {
		return basecache.Whole(req.GetBlockHashes()), lookup, nil
	}
	ch, err := s.chains.Expand(b.GetKey(), int(b.GetBlocks()), req.GetBlockHashes())
	if err != nil {
		s.metrics.chainBases.WithLabelValues("route", "not_held").Inc()
		return basecache.Chain{}, lookup, err
	}
	s.metrics.chainBases.WithLabelValues("route", "held").Inc()
	req.BlockHashes, req.Base = ch.Hashes, nil
	if ch.Tag > 0 { // the indexer that kept the base, as tagged when it was kept
		lookup.base, lookup.holder = b, ch.Tag-1
	}
	return ch, lookup, nil
}

// routeDecision describes a route for WatchRouteDecisions.
func routeDecision(req *schedulerv1.RouteRequest, worker string, reason routing.Reason, matched int, now time.Time) *schedulerv1.WatchRouteDecisionsResponse {
	agent := req.GetAgent()
	d := &schedulerv1.RouteDecision{
		RequestId: req.GetRequestId(), SessionId: agent.GetSessionId(), ParentSessionId: agent.GetParentSessionId(),
		Tenant: agent.GetTenant(), WorkerId: worker, Reason: string(reason), DecidedAt: timestamppb.New(now),
	}
	if hashes := req.GetBlockHashes(); matched > 0 && matched <= len(hashes) {
		d.MatchedBlocks, d.MatchedBlockHash = uint32(matched), hashes[matched-1]
	}
	return &schedulerv1.WatchRouteDecisionsResponse{Decision: d}
}

// WatchRouteDecisions streams every route decided from now on.
func (s *Service) WatchRouteDecisions(_ *schedulerv1.WatchRouteDecisionsRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchRouteDecisionsResponse]) error {
	sub := s.decisionSubs.subscribe(nil)
	defer s.decisionSubs.unsubscribe(sub)
	// Headers go out now, so the client knows it is subscribed.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	return pump(stream.Context(), s.stop, sub, stream.Send)
}

// admit runs admission until the turn may run, blocking while it must wait.
func (s *Service) admit(ctx context.Context, turn turns.Turn) (admission.Admission, time.Duration, error) {
	start := s.now()
	var w *admission.Waiter
	for {
		s.mu.Lock()
		s.shareLocked()
		a := s.pipe.Admit(s.now(), turn, w)
		s.publish(a.Events)
		s.mu.Unlock()
		if a.Verdict == admission.Shed {
			s.metrics.shed.Inc()
			return admission.Admission{}, 0, shedStatus(a.RetryAfter)
		}
		if a.Verdict == admission.Run {
			var waited time.Duration
			if w != nil {
				waited = s.now().Sub(start)
			}
			return a, waited, nil
		}
		w = a.Waiter
		s.metrics.waitingTurns.Inc()
		var err error
		select {
		case <-w.Ready():
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.stop:
			err = errShutdown
		}
		s.metrics.waitingTurns.Dec()
		if err != nil {
			s.mu.Lock()
			s.publish(s.pipe.Abandon(s.now(), w, errors.Is(err, context.Canceled)))
			s.mu.Unlock()
			// A wait given up is a wait too: left out, the histogram would
			// show least of the waits that matter most.
			s.metrics.admissionWait.Observe(s.now().Sub(start).Seconds())
			return admission.Admission{}, 0, err
		}
	}
}

// snapshot asks the flash indexer how much of the prompt each worker
// holds, then reads the live workers and their loads (after the index
// answered: the freshest the route can have them). The indexer that kept
// the session's previous chain is sent only what follows it (lookup), and
// the whole chain again if it no longer holds it; any other indexer the
// whole chain. buf.indexerKept says which indexer kept this chain (its
// index + 1; 0: none). An indexer that fails or is slow costs the route its
// overlap information, never the route itself.
func (s *Service) snapshot(ctx context.Context, req *schedulerv1.RouteRequest, lookup chainLookup, policy routing.Policy, buf *routeBuf) ([]*registry.Worker, error) {
	if len(s.reg.View().Workers) == 0 {
		return nil, routing.ErrNoWorkers
	}
	buf.indexerKept = 0
	var resp *flashindexv1.FindMatchesResponse
	if policy.UsesKV() && len(req.GetBlockHashes()) > 0 {
		var err error
		if resp, err = s.lookupOverlaps(ctx, req, lookup, buf); err != nil {
			return nil, err
		}
	}
	view := s.reg.View()
	workers := view.Workers
	if len(workers) == 0 {
		// Every worker left during the lookup: a chain the indexer kept
		// for it is never named as a base and ages out of its cache.
		return nil, routing.ErrNoWorkers
	}
	buf.view = view
	buf.overlaps = append(buf.overlaps[:0], make([]routing.Overlap, len(workers))...)
	buf.predicted = append(buf.predicted[:0], make([]int, len(workers))...)
	buf.rank = append(buf.rank[:0], make([]uint32, len(workers))...)
	overlaps := buf.overlaps
	for _, o := range resp.GetOverlaps() {
		i := view.Index(o.GetWorkerId())
		// Ranks of one worker: the worker holds what its best rank holds.
		if i < 0 || int(o.GetDeviceBlocks()) < overlaps[i].Device {
			continue
		}
		overlaps[i] = routing.Overlap{
			Device: int(o.GetDeviceBlocks()), HostExt: int(o.GetHostExtensionBlocks()),
			DiskExt: int(o.GetDiskExtensionBlocks()), SharedBeyondDevice: int(o.GetSharedBeyondDeviceBlocks()),
		}
		// At most the device prefix is only predicted; an indexer that
		// says more (a bug, a skewed version) must not make the route's
		// real prefix negative.
		buf.predicted[i] = min(int(o.GetPredictedDeviceBlocks()), int(o.GetDeviceBlocks()))
		buf.rank[i] = o.GetDpRank()
	}
	return workers, nil
}

// lookupOverlaps is snapshot's lookup: the indexers' answer, nil when none
// answered (counted and logged: the route goes on without overlaps); an
// error only when the caller's context ended.
func (s *Service) lookupOverlaps(ctx context.Context, req *schedulerv1.RouteRequest, lookup chainLookup, buf *routeBuf) (*flashindexv1.FindMatchesResponse, error) {
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FindMatchesTimeout)
	defer cancel()
	hashes := req.GetBlockHashes()
	reqFor := func(i int) *flashindexv1.FindMatchesRequest {
		q := &flashindexv1.BlockHashes{BlockHashes: hashes, Keep: lookup.keep}
		if lookup.base != nil && i == lookup.holder {
			q.BlockHashes, q.Base = hashes[lookup.base.GetBlocks():], lookup.base
		}
		return &flashindexv1.FindMatchesRequest{Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: q}, IncludePredicted: s.cfg.PredictOnRouteTTL > 0}
	}
	first := lookup.holder
	if first < 0 {
		first = s.index.sessionIndexer(req.GetAgent())
	}
	resp, i, err := s.index.findMatches(fctx, first, reqFor)
	if lookup.base != nil && i == lookup.holder {
		switch {
		case err == nil:
			s.metrics.chainBases.WithLabelValues("find_matches", "held").Inc()
		case status.Code(err) == codes.NotFound:
			s.metrics.chainBases.WithLabelValues("find_matches", "not_held").Inc()
			lookup.base = nil
			resp, i, err = s.index.findMatches(fctx, first, reqFor)
		}
	}
	if err == nil {
		if resp.GetChainKept() != 0 {
			buf.indexerKept = i + 1
		}
		return resp, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	s.metrics.findMatchesFails.Inc()
	if !errors.Is(err, errNoIndexer) { // that one the readiness gauge shows, not every route's log
		s.log.WarnContext(ctx, "FindMatches failed; routing without overlap", "request_id", req.GetRequestId(), "err", err)
	}
	return nil, nil
}

// routeBuf holds one Route's scratch space, reused across calls: with a
// thousand workers, building candidates would otherwise allocate ~100 KB
// per route.
type routeBuf struct {
	cands    []routing.Candidate
	view     *registry.View
	overlaps []routing.Overlap // per worker of the view, in its order
	// predicted is, per worker, how much of overlaps' Device only a
	// prediction covers; rank is the DP rank that overlap is of.
	predicted []int
	rank      []uint32
	// indexerKept is the flash indexer that kept the route's chain (its
	// index + 1; 0: none), as snapshot found.
	indexerKept int
}

var routeBufs = sync.Pool{New: func() any { return &routeBuf{} }}

// candidates builds the routing candidates from the view snapshot read and
// the overlaps it placed: every live worker (the pipeline restricts them to
// admission's room).
func candidates(buf *routeBuf) []routing.Candidate {
	out := buf.cands[:0]
	for i, w := range buf.view.Workers {
		out = append(out, candidate(w, buf.overlaps[i]))
	}
	buf.cands = out
	return out
}

// MarkPrefillComplete drops a request's prompt tokens from its worker's
// prefill load: the frontend calls it on the first token. Unknown ids
// (finished, swept, or never routed here) are not an error: the report is
// advisory and may race FinishRequest.
func (s *Service) MarkPrefillComplete(ctx context.Context, req *schedulerv1.MarkPrefillCompleteRequest) (*schedulerv1.MarkPrefillCompleteResponse, error) {
	if req.GetRequestId() == "" {
		return nil, toStatus(invalid("request_id is required"))
	}
	s.mu.Lock()
	known := s.pipe.MarkPrefillDone(req.GetRequestId())
	s.mu.Unlock()
	s.metrics.prefillMarks.WithLabelValues(boolLabel(known)).Inc()
	return &schedulerv1.MarkPrefillCompleteResponse{}, nil
}

// FinishRequest frees the load a route added and moves the program to
// ACTING with the turn's real token count: the program of the session the
// turn was routed for (turns.Pipeline.Finish), which the session view
// counts it under too; a turn this replica did not route (another
// routed it, or it was swept stale) is counted under the session the
// finish names.
func (s *Service) FinishRequest(ctx context.Context, req *schedulerv1.FinishRequestRequest) (*schedulerv1.FinishRequestResponse, error) {
	if req.GetRequestId() == "" {
		return nil, toStatus(invalid("request_id is required"))
	}
	if err := checkIDs(req.GetRequestId(), req.GetWorkerId(), req.GetAgent()); err != nil {
		return nil, toStatus(err)
	}
	if tools := clipToolNames(req.GetToolCallNames()); !slices.Equal(tools, req.GetToolCallNames()) {
		req = proto.CloneOf(req)
		req.ToolCallNames = tools
	}
	now := s.now()
	s.mu.Lock()
	u := req.GetUsage()
	key, known, evs := s.pipe.Finish(now, req.GetRequestId(),
		turns.Ended{PromptTokens: int(u.GetPromptTokens()), CompletionTokens: int(u.GetCompletionTokens()),
			Tools: req.GetToolCallNames(), Aborted: req.GetFinishReason() == enginev1.FinishReason_FINISH_REASON_ABORT,
			Superseded: req.GetSuperseded()})
	s.publish(evs)
	s.mu.Unlock()
	// Compared as the pipeline keys sessions: a turn of no session has no
	// key, whatever tenant it names.
	named := admission.Key{Tenant: req.GetAgent().GetTenant(), SessionID: req.GetAgent().GetSessionId()}
	if agent := req.GetAgent(); known && turns.SessionKey(named) != turns.SessionKey(key) {
		s.log.WarnContext(ctx, "FinishRequest names another session than the turn was routed for; counted under the routed one",
			"request_id", req.GetRequestId(), "routed_tenant", key.Tenant, "routed_session", key.SessionID,
			"named_tenant", agent.GetTenant(), "named_session", agent.GetSessionId())
		req = proto.CloneOf(req)
		req.Agent = &agentv1.AgentContext{Tenant: key.Tenant, SessionId: key.SessionID}
	}
	s.sessions.record(req, now)
	s.preds.finished(req.GetRequestId()) // last: a turn waiting for it sees all of it
	if req.GetWorkerFailed() {
		s.suspect(req.GetWorkerId())
	}
	return &schedulerv1.FinishRequestResponse{}, nil
}
