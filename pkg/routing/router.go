package routing

import (
	"errors"
	"slices"
	"time"
)

// ErrNoWorkers means there was no candidate to route to.
var ErrNoWorkers = errors.New("routing: no workers")

// Reason says why a worker was chosen.
type Reason string

const (
	ReasonCost        Reason = "cost"         // argmin / softmax of the KV cost
	ReasonRoundRobin  Reason = "round_robin"  // next in turn
	ReasonLeastLoaded Reason = "least_loaded" // fewest active blocks
	ReasonAffinity    Reason = "affinity"     // the session's bound worker
	ReasonSubagent    Reason = "subagent"     // the parent session's worker
	ReasonPinned      Reason = "pinned"       // the caller pinned the worker (admission)
	ReasonInherited   Reason = "inherited"    // an inherited session's worker, from the index
)

// Decision is the outcome of one Route.
type Decision struct {
	Worker string
	Reason Reason
	// Scores holds every candidate's cost breakdown, in candidate order. It
	// aliases the router's buffer: valid until the next Route.
	Scores []Score
	Chosen int // index of Worker in Scores
}

// ChosenScore returns the winner's breakdown.
func (d *Decision) ChosenScore() Score { return d.Scores[d.Chosen] }

// Router holds the routing state of one scheduler: in-flight load, session
// bindings and the round-robin cursor.
type Router struct {
	cfg    Config
	rng    Rand
	load   *LoadTracker
	aff    *Affinity
	rr     int
	scores []Score
	inputs []costInput
}

// New returns a Router; a nil cfg means DefaultConfig().
func New(cfg *Config, rng Rand) (*Router, error) {
	c := DefaultConfig()
	if cfg != nil {
		c = *cfg
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if rng == nil {
		return nil, errors.New("routing: nil random source")
	}
	return &Router{cfg: c, rng: rng, load: NewLoadTracker(), aff: NewAffinity(c.AffinityTTL)}, nil
}

// Config returns the router's configuration.
func (r *Router) Config() Config { return r.cfg }

// Load exposes the in-flight load tracker (read it, don't keep it).
func (r *Router) Load() *LoadTracker { return r.load }

// Affinity exposes the binding table.
func (r *Router) Affinity() *Affinity { return r.aff }

// Route picks a worker among the candidates for req, records the request's
// load on it (and a session lease for affinity policies) and returns the
// decision. pin, when non-empty and a candidate, is chosen outright: the
// admission controller has placed the program there.
func (r *Router) Route(now time.Time, req Request, cands []Candidate, pin string) (Decision, error) {
	if len(cands) == 0 {
		return Decision{}, ErrNoWorkers
	}
	bs := req.BlockSize
	if bs <= 0 {
		bs = r.cfg.BlockSize
	}
	policy := req.Policy
	if policy == "" {
		policy = r.cfg.Policy
	}
	r.scoreAll(&req, bs, cands)

	d := Decision{Scores: r.scores, Chosen: -1}
	if pin != "" {
		if i := indexOf(cands, pin); i >= 0 {
			d.Chosen, d.Reason = i, ReasonPinned
		}
	}
	affinity := policy.UsesAffinity() && r.cfg.AffinityTTL > 0 && req.SessionID != ""
	if d.Chosen < 0 && affinity {
		d.Chosen, d.Reason = r.affine(now, policy, &req, bs, cands)
	}
	if d.Chosen < 0 {
		d.Chosen, d.Reason = r.choose(policy, cands)
	}
	d.Worker = cands[d.Chosen].Worker

	chosen := &r.scores[d.Chosen]
	prefill := req.ISLTokens - chosen.Overlap.Device*bs
	if prefill < 0 {
		prefill = 0
	}
	r.load.Add(now, req.ID, d.Worker, req.SessionID, prefill, req.ISLTokens, bs)
	if affinity {
		r.aff.Acquire(now, req.SessionID, d.Worker)
	}
	return d, nil
}

// scoreAll fills r.scores with every candidate's cost.
func (r *Router) scoreAll(req *Request, bs int, cands []Candidate) {
	r.scores = r.scores[:0]
	r.inputs = r.inputs[:0]
	minPrefill := -1
	for i := range cands {
		t := r.load.Worker(cands[i].Worker)
		rep := &cands[i].Reported
		// The report may predate some of this router's finishes: take
		// those out, or a worker stays charged for them until its next
		// heartbeat.
		in := costInput{
			activePrefillTokens: t.PrefillTokens,
			decodeBlocks:        max(t.DecodeBlocks, rep.ActiveBlocks-t.FreedBlocks),
			activeRequests:      max(t.Requests, rep.RunningRequests+rep.WaitingRequests-t.FreedRequests),
		}
		r.inputs = append(r.inputs, in)
		if minPrefill < 0 || in.activePrefillTokens < minPrefill {
			minPrefill = in.activePrefillTokens
		}
	}
	r.scores = slices.Grow(r.scores, len(cands))[:len(cands)]
	for i := range cands {
		score(&r.scores[i], &r.cfg, req, bs, &cands[i], r.inputs[i], minPrefill)
	}
}

// choose applies the policy's selection rule to the scored candidates.
func (r *Router) choose(policy Policy, cands []Candidate) (int, Reason) {
	switch policy {
	case PolicyRoundRobin:
		i := r.rr % len(cands)
		r.rr++
		return i, ReasonRoundRobin
	case PolicyLeastLoaded:
		return r.leastLoaded(), ReasonLeastLoaded
	}
	if r.cfg.Temperature > 0 {
		return softmax(r.scores, r.cfg.Temperature, r.rng), ReasonCost
	}
	return argmin(r.scores, r.rng), ReasonCost
}

// leastLoaded picks the fewest active blocks, then fewest active requests,
// ties at random; it ignores cache overlap on purpose (the baseline).
func (r *Router) leastLoaded() int {
	best, ties := -1, 0
	for i := range r.scores {
		s, b := &r.scores[i], (*Score)(nil)
		if best >= 0 {
			b = &r.scores[best]
		}
		switch {
		case b == nil || s.DecodeBlocks < b.DecodeBlocks ||
			(s.DecodeBlocks == b.DecodeBlocks && s.ActiveRequests < b.ActiveRequests):
			best, ties = i, 1
		case s.DecodeBlocks == b.DecodeBlocks && s.ActiveRequests == b.ActiveRequests:
			ties++
			if r.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// affine applies session affinity and sub-agent placement; -1 means "no
// opinion, use the cost".
func (r *Router) affine(now time.Time, policy Policy, req *Request, bs int, cands []Candidate) (int, Reason) {
	bound, reason := -1, ReasonAffinity
	if w, ok := r.aff.Lookup(now, req.SessionID); ok {
		if bound = indexOf(cands, w); bound < 0 {
			// The bound worker is gone or ineligible: the binding is void.
			r.aff.Forget(req.SessionID)
			return -1, ""
		}
	} else if req.Inherited {
		bound, reason = r.mostCached(), ReasonInherited
	}
	if bound >= 0 {
		if r.cfg.AffinityMode == AffinityHard {
			return bound, reason
		}
		best, _ := r.choose(policy, cands)
		if r.scores[best].Cost < r.scores[bound].Cost-r.cfg.SoftAffinityMarginBlocks {
			return best, ReasonCost
		}
		return bound, reason
	}
	if req.ParentSessionID == "" {
		return -1, ""
	}
	w, ok := r.aff.Lookup(now, req.ParentSessionID)
	if !ok {
		return -1, ""
	}
	i := indexOf(cands, w)
	if i < 0 || !r.hasRoom(&cands[i], &r.inputs[i], requestBlocks(req.ISLTokens, bs), bs) {
		return -1, ""
	}
	return i, ReasonSubagent
}

// mostCached is the candidate holding the longest device prefix of the
// request (the lowest cost among equals), -1 when none holds any.
func (r *Router) mostCached() int {
	best := -1
	for i := range r.scores {
		s := &r.scores[i]
		if s.Overlap.Device > 0 && (best < 0 || s.Overlap.Device > r.scores[best].Overlap.Device ||
			s.Overlap.Device == r.scores[best].Overlap.Device && s.Cost < r.scores[best].Cost) {
			best = i
		}
	}
	return best
}

// hasRoom reports whether a worker can take one more request of reqBlocks
// while staying under SubagentMaxUtilization of its KV capacity.
func (r *Router) hasRoom(c *Candidate, in *costInput, reqBlocks, bs int) bool {
	if c.Reported.MaxRunning > 0 && in.activeRequests >= c.Reported.MaxRunning {
		return false
	}
	if c.Reported.CapacityTokens <= 0 {
		return true
	}
	used := float64((in.decodeBlocks + reqBlocks) * bs)
	return used < r.cfg.SubagentMaxUtilization*float64(c.Reported.CapacityTokens)
}

// MarkPrefillDone records the request's first token.
func (r *Router) MarkPrefillDone(id string) bool { return r.load.MarkPrefillDone(id) }

// Finish frees the request's load and its session lease (generated is its
// completion tokens, 0 when unknown); it returns the worker it ran on and
// the session it was routed for; ok is false for a request it does not
// track.
func (r *Router) Finish(now time.Time, id string, generated int) (worker, session string, ok bool) {
	worker, session, orphaned, ok := r.load.Free(now, id, generated)
	if ok && session != "" && !orphaned { // an orphan's binding went with its worker
		r.aff.Release(now, session)
	}
	return worker, session, ok
}

// EndSession drops a session's binding (session_final).
func (r *Router) EndSession(session string) { r.aff.Forget(session) }

// Reported records that worker has just reported its load (a heartbeat):
// the requests finished before it no longer need taking out of it.
func (r *Router) Reported(worker string) { r.load.Reported(worker) }

// ReportedAt records a report of worker's load sampled at sampled or later
// (LoadTracker.ReportedAt).
func (r *Router) ReportedAt(worker string, sampled time.Time) { r.load.ReportedAt(worker, sampled) }

// Running records that worker still runs the requests ids at now (its
// heartbeat names them): the stale sweep (Expire) counts their age from now.
func (r *Router) Running(now time.Time, worker string, ids []string) {
	r.load.Running(now, worker, ids)
}

// RemoveWorker forgets a worker's in-flight load and bindings.
func (r *Router) RemoveWorker(worker string) {
	r.load.RemoveWorker(worker)
	r.aff.RemoveWorker(worker)
}

// Freed is an in-flight request dropped without a Finish.
type Freed struct {
	ID, Worker, SessionID string
}

// Expire reaps idle bindings and stale in-flight entries (their finish was
// lost); run it periodically. The caller may want to tell admission control
// about the stale requests' sessions.
func (r *Router) Expire(now time.Time) (bindings int, stale []Freed) {
	bindings = r.aff.Expire(now)
	if r.cfg.StaleRequestAfter > 0 {
		for _, id := range r.load.Stale(now, r.cfg.StaleRequestAfter) {
			w, session, orphaned, ok := r.load.Free(now, id, 0)
			if !ok {
				continue
			}
			if session != "" && !orphaned {
				r.aff.Release(now, session)
			}
			stale = append(stale, Freed{ID: id, Worker: w, SessionID: session})
		}
	}
	return bindings, stale
}

func indexOf(cands []Candidate, worker string) int {
	for i := range cands {
		if cands[i].Worker == worker {
			return i
		}
	}
	return -1
}
