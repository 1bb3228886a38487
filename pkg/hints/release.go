package hints

import "switchyard.dev/pkg/sessionindex"

// PolicyReleaseFinished tells every worker that holds a terminated program's
// lineage that the session is finished.
const PolicyReleaseFinished = "release_finished"

func init() {
	register(policyDef{
		name: PolicyReleaseFinished, rank: 10,
		desc: "When a program terminates, tell every worker holding its lineage that the session is finished, so its blocks are evicted before anyone else's.",
		new:  func(Config) policy { return &releaseFinished{sessions: map[string]*releaseState{}} },
	})
}

// releaseFinished goes first: releasing a finished session frees what the
// other policies need.
type releaseFinished struct {
	hooks
	sessions map[string]*releaseState
}

type releaseState struct {
	on      map[string]bool // workers told
	pending []string        // workers this round proposed to tell
	done    bool            // every worker was told
}

func (r *releaseFinished) state(session string) *releaseState {
	st := r.sessions[session]
	if st == nil {
		st = &releaseState{on: map[string]bool{}}
		r.sessions[session] = st
	}
	return st
}

func (r *releaseFinished) wants(_ *round, p *program) (LineageQuery, bool) {
	if p.Lifecycle != LifecycleTerminated || r.state(p.Session).done {
		return LineageQuery{}, false
	}
	return LineageQuery{Session: p.Session}, true // on every worker
}

func (r *releaseFinished) propose(rd *round, p *program, chains []sessionindex.Chain) {
	st := r.state(p.Session)
	// Every worker the session touched: its current one, where it was
	// demoted, and any worker its lineage names.
	workers := map[string]bool{}
	for _, w := range []string{p.lastWorker, p.demotedOn} {
		if w != "" {
			workers[w] = true
		}
	}
	for _, c := range chains {
		workers[c.Worker] = true
	}
	st.pending = st.pending[:0]
	for _, w := range sortedKeys(workers) {
		if !st.on[w] {
			st.pending = append(st.pending, w)
		}
	}
	if len(st.pending) == 0 {
		st.done = true
		return
	}
	for _, w := range st.pending {
		rd.propose(p, Action{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: w, Session: p.Session})
	}
}

func (r *releaseFinished) sent(p *program, a Action) {
	st := r.state(p.Session)
	st.on[a.Worker] = true
	for _, w := range st.pending {
		if !st.on[w] {
			return
		}
	}
	st.done = true
}

func (r *releaseFinished) outcome(p *program, a Action, res Result) {
	if res != ResultError {
		return
	}
	st := r.state(p.Session)
	delete(st.on, a.Worker)
	st.done = false
}

// busy: a terminated program stays until every worker was told.
func (r *releaseFinished) busy(p *program) bool { return !r.state(p.Session).done }

func (r *releaseFinished) forget(session string) { delete(r.sessions, session) }
