package replay

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/trace"
	"switchyard.dev/pkg/turns"
)

// inflight is one turn sent to an engine.
type inflight struct {
	session   int
	turn      int
	worker    int
	id        string
	sent      time.Duration // when the client sent it (before any admission wait)
	firstTok  time.Duration
	gotFirst  bool
	input     int
	output    int
	idealHit  int // prompt tokens an infinite cache would hold (see hashes)
	routedHit int // prompt tokens an infinite cache on its worker would hold
	clipped   bool
	active    bool
	waiting   bool
	admitted  time.Duration // when routing placed it on an engine
	waitStart time.Duration
}

// send issues session i's turn (the one its walk says is next):
// admission, then routing over the index's overlaps, then the engine.
func (s *sim) send(i, turn int) {
	ss := &s.sessions[i]
	t := &ss.s.Turns[turn]
	r := inflight{session: i, turn: turn, sent: s.now, active: true}
	r.input, r.output = s.clip(t)
	r.clipped = r.input < t.InputLen || r.output < t.OutputLen
	s.reqs = append(s.reqs, r)
	s.dispatch(len(s.reqs) - 1)
}

// clip is the prompt and output a turn sends: prompts longer than the
// model's context (or the cache) less the output keep their first tokens,
// and an output that leaves a prompt less than a block (or than the whole
// prompt, when that is shorter) is cut to leave it that.
func (s *sim) clip(t *trace.Turn) (input, output int) {
	input, output = t.InputLen, max(t.OutputLen, 1)
	if limit := s.maxInput - output - 1; input > limit {
		if keep := min(s.engineBlock, input); limit < keep {
			output, limit = s.maxInput-keep-1, keep
		}
		input = max(limit, 1)
	}
	return input, output
}

// park holds a turn back (admission says wait), counting its wait from the
// first time.
func (s *sim) park(ri int) {
	r := &s.reqs[ri]
	if !r.waiting {
		r.waiting, r.waitStart = true, s.now
		s.win.waitStarted(s.now)
	}
	s.sessions[r.session].parked = ri
}

// dispatch takes turn ri through admission (a wait or a shed parks it), then
// routing over the index's overlaps, into its worker's engine, and starts
// the worker's steps if it was idle. A parked turn comes back here when its
// waiter fires (wake), its kv_cap slot frees up or its retry is due.
func (s *sim) dispatch(ri int) {
	r := &s.reqs[ri]
	ss := &s.sessions[r.session]
	t := &ss.s.Turns[r.turn]
	if s.capper != nil && ss.parent < 0 && !ss.capHeld {
		if !s.capper.Admit(ss.key) {
			s.capWait[ss.key] = r.session
			s.park(ri)
			return
		}
		ss.capHeld = true
	}
	parent := ""
	if p := ss.parent; p >= 0 {
		parent = s.sessions[p].id
	}
	turn := turns.Turn{RequestID: ss.id + "#" + strconv.Itoa(r.turn), Key: ss.key, ParentSessionID: parent,
		PromptTokens: r.input, BlockSize: s.engineBlock, Continued: r.turn > 0,
		Final: s.cfg.SessionEnd == SessionEndFinal && r.turn == len(ss.s.Turns)-1}
	pipe := s.rep.pipes[ss.owner]
	s.rep.share(ss.owner, s.now, s.byID)
	a := pipe.Admit(s.at(), turn, ss.waiter)
	if s.recording() {
		s.record(Call{Op: CallAdmit, Replica: ss.owner, Turn: turn, Woken: ss.waiter != nil, Admission: a, Others: s.rep.othersOf(ss.owner, s.now)})
	}
	s.observeAdmission(a.Events)
	ss.waiter = nil
	switch a.Verdict {
	case admission.Wait:
		s.parked = append(s.parked, r.session)
		ss.waiter = a.Waiter
		s.park(ri)
		return
	case admission.Shed:
		s.win.shed()
		s.park(ri)
		s.push(s.now+a.RetryAfter, evRetry, r.session)
		return
	}
	if r.waiting {
		s.win.waited(r.waitStart, s.now)
		r.waiting = false
	}
	ss.parked = -1
	hashes, reuse, ideal := s.hashes(ss, t, r.input, ri)
	r.idealHit = ideal
	turn.Blocks = len(hashes)
	if pipe.NeedsAnchors(&turn) {
		turn.Anchors = turns.Anchors(hashes)
	}
	r.id = turn.RequestID
	cands := s.candidates(hashes)
	d, err := pipe.Place(s.at(), turn, a, cands)
	if err != nil {
		panic(err) // unreachable: every worker is a candidate
	}
	if s.recording() {
		s.record(Call{Op: CallPlace, Replica: ss.owner, Turn: turn, Admission: a, Hashes: hashes, Candidates: cands, Placement: d})
	}
	s.observeAdmission(d.Events)
	s.observe(ss, hints.PhaseReasoning, hints.LifecycleActive, d.Worker)
	wi := s.byID[d.Worker]
	r.worker, r.admitted = wi, s.now
	w := s.workers[wi]
	r.routedHit = s.routedIdeal(ss, w, wi, hashes, reuse, r.input)
	if err := w.eng.Add(enginesim.Request{ID: r.id, SessionID: ss.id, Prompt: s.prompt[:r.input],
		BlockHashes: hashes, MaxTokens: r.output, OutputLen: r.output, IgnoreEOS: true, Priority: d.Priority, Retain: d.Retain}); err != nil {
		panic(fmt.Sprintf("replay: engine refused %s: %v", r.id, err)) // prompts are clipped to fit
	}
	s.reqByID[r.id] = int32(ri)
	if !w.scheduled {
		s.wakeWorker(w)
		w.scheduled = true
		s.push(s.now, evStep, wi)
	}
}

// candidates is every worker with its load and its overlap with the
// prompt, as the scheduler builds them from the registry (in its order)
// and the flash indexer.
func (s *sim) candidates(hashes []kv.BlockHash) []routing.Candidate {
	s.ix.FindMatchesInto(&s.matches, hashes)
	clear(s.match)
	for _, m := range s.matches.Workers {
		s.match[m.Worker] = m
	}
	s.cands = s.cands[:0]
	for _, wi := range s.listed {
		w := s.workers[wi]
		st := w.eng.Load()
		for _, p := range s.rep.pipes {
			p.Reported(w.id) // read now: nothing finished since
		}
		c := w.eng.Config()
		m, ok := s.match[w.id]
		if !ok {
			m.Shared = s.matches.PoolPrefix
		}
		s.cands = append(s.cands, routing.Candidate{
			Worker: w.id,
			Reported: routing.Load{RunningRequests: st.Running, WaitingRequests: st.Waiting,
				ActiveBlocks: st.UsedBlocks, CapacityTokens: int64(c.NumGPUBlocks+c.HostBlocks+c.DiskBlocks) * int64(c.BlockSize),
				MaxRunning: c.MaxNumSeqs},
			Overlap: routing.Overlap{Device: m.Device, HostExt: m.Host, DiskExt: m.Disk, SharedBeyondDevice: m.Shared},
		})
	}
	return s.cands
}

// answerHoldings answers a pipeline's questions about what its idle
// programs still hold from the simulated engines' index, as the scheduler
// answers them from the flash indexer.
func (s *sim) answerHoldings(replica int) {
	p := s.rep.pipes[replica]
	h := &s.held
	for _, q := range p.Holdings() {
		var used int
		h.chain, used = s.ix.Resident(&h.matches, q.Hashes(), h.chain)
		m, _ := h.matches.Of(q.Worker)
		a := turns.HoldingAnswer{Anchor: max(used, 0), ChainBlocks: len(h.chain),
			Overlap: routing.Overlap{Device: m.Device, HostExt: m.Host, DiskExt: m.Disk}}
		p.Held(q, a)
		if s.recording() {
			q.Anchors = slices.Clone(q.Anchors)
			s.record(Call{Op: CallHeld, Replica: replica, Key: q.Key, Query: q, Answer: a})
		}
	}
}

// wake re-admits every parked turn whose waiter fired.
func (s *sim) wake() {
	if len(s.parked) == 0 {
		return
	}
	keep := s.parked[:0]
	var ready []int
	for _, i := range s.parked {
		ss := &s.sessions[i]
		select {
		case <-ss.waiter.Ready():
			ready = append(ready, i)
		default:
			keep = append(keep, i)
		}
	}
	s.parked = keep
	for _, i := range ready {
		if ri := s.sessions[i].parked; ri >= 0 {
			s.dispatch(ri)
		}
	}
}
