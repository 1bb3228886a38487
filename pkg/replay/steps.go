package replay

import (
	"errors"
	"fmt"
	"time"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/flashindex"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/turns"
)

// pendingOut is the part of a step's output the simulator acts on.
type pendingOut struct {
	req    int32 // index into sim.reqs
	first  bool
	cached int
	finish bool
	usage  enginesim.Usage
}

type worker struct {
	id        string
	eng       *enginesim.Engine
	scheduled bool // an evStep is queued
	events    []kv.Event
	outs      []pendingOut
	// stepEnd is when the current step ends; stepBusy says it computes
	// (Stats.BusyTime counts it whole from its start).
	stepEnd  time.Duration
	stepBusy time.Duration
	// idleSince is when the engine ran out of work (its clock moves only
	// with steps: wake tells it how long it idled).
	idleSince time.Duration
	// seen is every prompt block sent to this worker: its cache were it
	// infinite.
	seen map[kv.BlockHash]struct{}
}

// step ends worker wi's current step (applying what it produced) and
// starts the next one.
func (s *sim) step(wi int, stalled *int) error {
	w := s.workers[wi]
	if err := s.applyWorkerEvents(w, w.events); err != nil {
		return err
	}
	w.events = w.events[:0]
	outs := w.outs
	w.outs = w.outs[len(w.outs):]
	for _, o := range outs {
		s.output(o)
	}
	w.outs = outs[:0]
	w.stepBusy = 0
	if !w.eng.HasWork() {
		w.scheduled, w.idleSince = false, s.now
		return nil
	}
	res := w.eng.Step()
	if res.PrefillTokens > 0 || res.DecodeRequests > 0 {
		w.stepBusy = res.Duration // a step that only waited for a load is idle
	}
	w.events = append(w.events, res.Events...)
	s.followPool()
	for _, o := range res.Outputs {
		if !o.First && o.Finish == enginesim.FinishNone {
			continue
		}
		ri, ok := s.reqByID[o.RequestID]
		if !ok {
			continue
		}
		p := pendingOut{req: ri, first: o.First, cached: o.CachedTokens, finish: o.Finish != enginesim.FinishNone}
		if o.Usage != nil {
			p.usage = *o.Usage
		}
		w.outs = append(w.outs, p)
	}
	d := res.Duration
	if d <= 0 {
		// Nothing could be scheduled this iteration; the engine has work,
		// so something must free up on its own. Guard against a livelock.
		*stalled++
		if *stalled > 1_000_000 {
			return fmt.Errorf("replay: worker %s makes no progress at %v", w.id, s.now)
		}
		d = time.Microsecond
	} else {
		*stalled = 0
	}
	w.stepEnd = s.now + d
	s.push(w.stepEnd, evStep, wi)
	return nil
}

// wakeWorker tells an idle worker's engine how long it idled, before it
// books copies (a step's loads, a hint's).
func (s *sim) wakeWorker(w *worker) {
	if !w.scheduled {
		w.eng.Advance(s.now - w.idleSince)
		w.idleSince = s.now
	}
}

// applyWorkerEvents feeds a worker's KV events to the flash index (and the
// session-prefix index when hints are on).
func (s *sim) applyWorkerEvents(w *worker, evs []kv.Event) error {
	for _, ev := range evs {
		if err := s.ix.Apply(w.id, 0, ev); err != nil && !errors.Is(err, flashindex.ErrBadEvent) {
			return err
		}
	}
	s.followLineage(w.id, evs)
	return nil
}

// followPool hands the shared pool's new events to its index at once: the
// pool is one store, so its stream is applied in its own order, not delayed
// with the writing engine's step like the engines' own events.
func (s *sim) followPool() {
	if s.pool == nil {
		return
	}
	if evs := s.pool.TakeEvents(); len(evs) > 0 {
		s.poolIx.Apply(s.pool.Epoch(), evs)
	}
}

// output acts on one output of a step as the step ends: a first token marks
// the prefill done, a last one finishes the turn and moves its session on.
func (s *sim) output(o pendingOut) {
	r := &s.reqs[o.req]
	if o.first {
		r.firstTok, r.gotFirst = s.now, true
		owner := s.sessions[r.session].owner
		s.rep.pipes[owner].MarkPrefillDone(r.id)
		if s.recording() {
			s.record(Call{Op: CallPrefillDone, Replica: owner, RequestID: r.id, Key: s.sessions[r.session].key})
		}
		s.win.firstToken(s.now, r.sent)
	}
	if !o.finish {
		return
	}
	delete(s.reqByID, r.id)
	r.active = false
	ss := &s.sessions[r.session]
	ended := turns.Ended{PromptTokens: o.usage.PromptTokens, CompletionTokens: o.usage.CompletionTokens}
	_, _, evs := s.rep.pipes[ss.owner].Finish(s.at(), r.id, ended)
	if s.recording() {
		s.record(Call{Op: CallFinish, Replica: ss.owner, RequestID: r.id, Key: ss.key, Ended: ended, Events: evs})
	}
	s.win.turnDone(s, r, o.usage)
	s.win.setContext(s.now, ss, o.usage.PromptTokens+o.usage.CompletionTokens)
	s.observeAdmission(evs)
	s.wake()
	s.observe(ss, hints.PhaseActing, hints.LifecycleActive, s.workers[r.worker].id)
	if s.cfg.OnTurn != nil {
		s.cfg.OnTurn(s.turnResult(r, o.usage))
	}
	s.follow(r.session, s.sessions[r.session].walk.TurnDone(), ownGap)
}
