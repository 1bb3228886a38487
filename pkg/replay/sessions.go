package replay

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/trace"
	"switchyard.dev/pkg/turns"
)

// sessState is one instance of a trace session: a draw of a top-level
// session, or a sub-agent of one. Draws of the same trace session are
// separate instances with their own hash namespace.
type sessState struct {
	s        *trace.Session
	id       string // unique per instance: the trace id and the draw
	ns       uint64 // hash namespace of the draw
	parent   int    // instance index of the parent, -1 for a top-level draw
	started  time.Duration
	traceIdx int
	walk     trace.Walk // where it stands in its tree: the next turn, the sub-agents it waits for
	capHeld  bool       // holds a kv_cap slot
	partial  bool       // joined at a later turn: its time is no session's whole
	last     int        // worker of the last turn sent, -1 before the first
	context  int        // tokens of the last turn, prompt and output: what its next turn brings back
	key      admission.Key
	owner    int // the scheduler replica that owns its program
	prevIDs  []uint64
	prevHash []kv.BlockHash
	waiter   *admission.Waiter
	parked   int // index into sim.reqs of the turn waiting for admission, -1 none
}

// start is where one of the first draws joins the run: at a turn, with
// what is left of its tool gap.
type start struct {
	draw, traceIdx, turn int
	gapLeft              time.Duration
}

// drawSession returns the workload index of the next draw: the draws are
// one seeded sequence, the same for every policy.
func (s *sim) drawSession() int { return s.pool0[s.drawRNG.IntN(len(s.pool0))] }

// joinRunningFleet starts the first C sessions as a measurement of a fleet
// already running would find them, not all at their first turn in one
// instant: a session active at a random moment is one drawn in proportion
// to its duration, at a uniformly random point of it. So each is drawn with
// probability proportional to its time alone and joins at the turn a
// uniform point of that time falls in, sent when what is left of its tool
// gap has passed (so the first turns are spread over their cycles); its
// earlier turns are not replayed, and its first turn finds the cache cold,
// as at the start of any measurement. The sessions drawn later, as sessions
// end, start at their first turn (a closed loop).
func (s *sim) joinRunningFleet() {
	cum := make([]float64, len(s.pool0))
	var total float64
	for i, ti := range s.pool0 {
		total += float64(s.alone.session(ti))
		cum[i] = total
	}
	for range s.cfg.Concurrency {
		x := s.drawRNG.Float64() * total
		i := sort.SearchFloat64s(cum, x)
		ti := s.pool0[min(i, len(s.pool0)-1)]
		turn, gapLeft := s.alone.joinAt(ti, s.drawRNG.Float64())
		s.starting = append(s.starting, start{draw: s.draws, traceIdx: ti, turn: turn, gapLeft: gapLeft})
		s.draws++
		s.pending++
		s.push(0, evStart, len(s.starting)-1)
	}
}

// startTop starts draw d of top-level session ti now: at its first turn, or
// at a later one with what is left of its gap (joining mid-way).
func (s *sim) startTop(d, ti, turn int, gapLeft time.Duration) {
	s.active++
	s.startSessionAt(ti, -1, uint64(d+1)<<24, turn, gapLeft)
}

// startSession starts an instance of trace session ti under the draw's
// namespace ns (sub-agents share their draw's).
func (s *sim) startSession(ti, parent int, ns uint64) { s.startSessionAt(ti, parent, ns, 0, ownGap) }

// ownGap asks startSessionAt for the turn's own gap.
const ownGap time.Duration = -1

// startSessionAt starts it at one of its turns, after gap (ownGap: the
// turn's). A session joining the measurement mid-way is partial: no
// slowdown is measured for it.
func (s *sim) startSessionAt(ti, parent int, ns uint64, turn int, gap time.Duration) {
	ts := s.w.Sessions[ti]
	// A draw's sessions are named after the trace's, with the draw number
	// after the top-level id (trace_0042@7, trace_0042@7/agent_001).
	id := ts.ID + "@" + strconv.FormatUint(ns>>24, 10)
	i := len(s.sessions)
	if parent >= 0 {
		id = s.sessions[parent].id + "/" + subAgentName(ts, s.w.Sessions[ts.Parent])
		if _, taken := s.subAgents[id]; taken {
			// Two sub-agents of one parent named alike (ids "p/x" and "x"
			// under "p"): their programs and requests must stay apart.
			id += "~" + strconv.Itoa(i)
		}
		s.subAgents[id] = struct{}{}
	}
	key := admission.Key{SessionID: id}
	// A sub-agent goes with its parent, as a frontend sends it
	// (turns.OwnerKey).
	parentID := ""
	if parent >= 0 {
		parentID = s.sessions[parent].id
	}
	owner := s.rep.owner(turns.OwnerKey(key, parentID))
	s.sessions = append(s.sessions, sessState{s: ts, id: id, ns: ns, parent: parent, started: s.now, traceIdx: ti,
		parked: -1, last: -1, key: key, owner: owner, walk: trace.NewWalk(ts, turn, len(ts.Turns)), partial: turn > 0})
	s.follow(i, s.sessions[i].walk.Start(), gap)
}

// subAgentName is sub-agent ts's name below its parent's in a draw: its id
// within its tenant (the parent's name carries the tenant already:
// acme/s@7/agent_1, as s@7/agent_1 without one), past its parent's id and
// "/" where it starts with them (Weka's trace_0042/agent_001 under
// trace_0042), the same rule with a tenant as without.
func subAgentName(ts, parent *trace.Session) string {
	id := strings.TrimPrefix(ts.ID, tenantPrefix(ts))
	if rest, ok := strings.CutPrefix(id, strings.TrimPrefix(parent.ID, tenantPrefix(parent))+"/"); ok {
		return rest
	}
	return id
}

// tenantPrefix is what a recorded trace's session id starts with for its
// tenant ("acme/"; none without one).
func tenantPrefix(ts *trace.Session) string {
	if ts.Tenant == "" {
		return ""
	}
	return ts.Tenant + "/"
}

// follow does what session i's walk says comes next: it starts the
// sub-agents, then waits the gap (gap, or ownGap for the turn's own
// capped one), sends the turn or ends the session. A sub-agent may end as
// it starts (one with nothing to send) and move its parent's walk on: i's
// state is read afresh after the starts, never through a pointer held
// across them (they grow s.sessions).
func (s *sim) follow(i int, nx trace.Next, gap time.Duration) {
	ns := s.sessions[i].ns
	for _, c := range nx.Start {
		s.startSession(c, i, ns)
	}
	switch nx.Do {
	case trace.WaitGap:
		if gap == ownGap {
			gap = s.gap(&s.sessions[i].s.Turns[nx.Turn])
		}
		s.push(s.now+gap, evTurn, i)
	case trace.SendTurn:
		s.send(i, nx.Turn)
	case trace.EndSession:
		s.endSession(i)
	}
}

func (s *sim) gap(t *trace.Turn) time.Duration {
	if s.cfg.MaxGap > 0 && t.Gap > s.cfg.MaxGap {
		return s.cfg.MaxGap
	}
	return t.Gap
}

// endSession ends session i once its walk says so: after its last turn
// and its tail sub-agents.
func (s *sim) endSession(i int) {
	ss := &s.sessions[i]
	s.win.setContext(s.now, ss, 0)
	ss.prevIDs, ss.prevHash = nil, nil
	if s.cfg.SessionEnd == SessionEndExplicit {
		evs := s.rep.pipes[ss.owner].EndSession(s.at(), ss.key)
		s.observeAdmission(evs)
		if s.recording() {
			s.record(Call{Op: CallEndSession, Replica: ss.owner, Key: ss.key, Events: evs})
		}
		s.wake()
		// Without admission control the hint loop hears of programs from
		// the walk (hints.go), and of their end only when the pipeline is
		// told of it.
		s.observe(ss, hints.PhaseActing, hints.LifecycleTerminated, "")
	}
	if p := ss.parent; p >= 0 {
		s.follow(p, s.sessions[p].walk.ChildDone(), ownGap)
		return
	}
	if ss.capHeld {
		ss.capHeld = false
		for _, k := range s.capper.Release(ss.key) {
			wi := s.capWait[k]
			delete(s.capWait, k)
			s.sessions[wi].capHeld = true
			s.dispatch(s.sessions[wi].parked)
		}
	}
	s.win.sessionEnded(s, ss)
	s.active--
	d := s.draws
	s.draws++
	s.startTop(d, s.drawSession(), 0, ownGap)
}
