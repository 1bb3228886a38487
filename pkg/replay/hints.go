package replay

import (
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// hintLoop is the kvhint emitter inside the simulator, composed as the
// services compose it: the session-prefix index follows the engines' KV
// events, the hint policies follow program lifecycle — admission control's
// program events under session_aware (the scheduler's WatchPrograms
// stream), else the turns themselves — and every tick the policies' actions
// go to the engines as hints, whose outcomes go back to the policies.
type hintLoop struct {
	pol     *hints.Engine
	lineage *sessionindex.Index
	tick    time.Duration
	sent    int64
	moved   int64            // blocks the engines moved for hints
	results map[string]int64 // by the engine's answer (hints.Result)
	support map[string]hints.Support
}

// hintTick is how often the policies decide: the emitter's default tick.
const hintTick = 250 * time.Millisecond

func newHintLoop(cfg hints.Config) *hintLoop {
	return &hintLoop{pol: hints.New(cfg), lineage: sessionindex.New(sessionindex.Config{}), tick: hintTick,
		results: make(map[string]int64), support: make(map[string]hints.Support)}
}

// hintView answers the policies' questions from the simulator's state, as
// the emitter's view does from the mesh's: lineage in one batch per tick,
// with shared counts, and each engine's announced hint support.
type hintView struct{ s *sim }

var (
	_ hints.BatchView   = hintView{}
	_ hints.SupportView = hintView{}
)

func (v hintView) Lineage(session, worker string) ([]sessionindex.Chain, error) {
	return v.s.hints.lineage.Lineage(session, worker), nil
}

func (v hintView) Lineages(qs []hints.LineageQuery) ([][]sessionindex.Chain, error) {
	out := make([][]sessionindex.Chain, len(qs))
	for i, q := range qs {
		out[i] = v.s.hints.lineage.Lineage(q.Session, q.Worker)
	}
	return out, nil
}

// HintSupport is what the worker's engine announces (fixed by its
// configuration, so asked once).
func (v hintView) HintSupport(worker string) hints.Support {
	h := v.s.hints
	if sup, ok := h.support[worker]; ok {
		return sup
	}
	wi, ok := v.s.byID[worker]
	if !ok {
		return hints.Support{}
	}
	sup := v.s.workers[wi].eng.HintSupport()
	h.support[worker] = sup
	return sup
}

func (v hintView) KVUsage(worker string) (float64, bool) {
	wi, ok := v.s.byID[worker]
	if !ok {
		return 0, false
	}
	return v.s.workers[wi].eng.Load().KVUsage, true
}

// observe tells the policies about a program change the simulator made
// itself (runs without admission control).
func (s *sim) observe(ss *sessState, phase hints.Phase, lc hints.Lifecycle, worker string) {
	if s.hints == nil || s.ctrl != nil {
		return
	}
	p := hints.Program{Session: ss.id, Phase: phase, Lifecycle: lc, Worker: worker, PhaseSince: s.at()}
	if par := ss.parent; par >= 0 {
		p.Parent = s.sessions[par].id
	}
	s.hints.pol.Observe(s.at(), p)
}

// observeAdmission forwards admission control's program events.
func (s *sim) observeAdmission(evs []admission.Event) {
	if s.hints == nil {
		return
	}
	for _, ev := range evs {
		if s.hints.pol.Watches(ev.Reason) { // as the emitter asks the scheduler
			s.hints.pol.Observe(s.at(), hints.ProgramOf(ev.Program))
		}
	}
}

// followLineage applies a worker's KV events to the session-prefix index.
func (s *sim) followLineage(worker string, evs []kv.Event) {
	if s.hints == nil {
		return
	}
	for _, ev := range evs {
		_ = s.hints.lineage.Apply(worker, ev, s.at()) // a refused event only thins the lineage
	}
}

// decideHints runs one emitter tick: the policies' actions become engine
// hints. A hint's cache changes come after the worker's current step's in
// its event stream, so they join that step's events (or apply at once when
// the worker is idle).
func (s *sim) decideHints() {
	h := s.hints
	for _, a := range h.pol.Decide(s.at(), hintView{s}) {
		wi, ok := s.byID[a.Worker]
		if !ok {
			h.pol.Outcome(a, hints.ResultRejected)
			h.results[hints.ResultRejected.String()]++
			continue
		}
		w := s.workers[wi]
		s.wakeWorker(w)
		o := w.eng.ApplyHint(enginesim.Hint{Kind: a.Kind, SessionID: a.Session, Blocks: a.Blocks})
		s.followPool()
		h.pol.Outcome(a, o.Status)
		h.sent++
		h.moved += int64(o.Blocks)
		h.results[o.Status.String()]++
		if w.scheduled {
			w.events = append(w.events, o.Events...)
			continue
		}
		s.applyWorkerEvents(w, o.Events)
		if w.eng.HasWork() { // a deferred hint's retry needs steps
			w.scheduled = true
			s.push(s.now, evStep, wi)
		}
	}
}
