package hints

import "switchyard.dev/pkg/sessionindex"

// The demote policies move the blocks only one session holds off a
// worker's GPU while the session does not need them: during a long tool
// call, and while admission control has it paused. prefetch_on_resume
// brings them back.
const (
	PolicyDemoteLongTool = "demote_long_tool_call"
	PolicyDemotePaused   = "demote_paused"
)

// demote_long_tool_call is off by default: on an engine that already
// offloads what it evicts to host memory (the simulated engine, vLLM with a
// CPU offload connector), demoting early only empties GPU blocks while it
// pushes other sessions out of host memory. BenchmarkHintsEffect (one
// worker, 60 agents, effect_test.go) measured, against no hints, −19% to
// −26% re-prefilled tokens with the defaults and +6% to +13% with every
// policy on (seeds 1–4). Enable it for engines that drop what they evict.
func init() {
	register(policyDef{
		name: PolicyDemoteLongTool, rank: 20, off: true, phases: true,
		desc: "When a program has been in a tool call (ACTING) longer than the recent median tool time (times LongToolFactor), demote the blocks only it holds on its worker to host memory instead of letting LRU drop them, if running requests hold more of the GPU than the demote threshold. Off by default: it only pays on engines that drop what they evict.",
		new:  func(cfg Config) policy { return &demoteLongTool{demoter{cfg: cfg}} },
	})
	register(policyDef{
		name: PolicyDemotePaused, rank: 30,
		desc: "When admission control pauses a program, demote the blocks only it holds on its last worker to host memory.",
		new:  func(cfg Config) policy { return &demotePaused{demoter: demoter{cfg: cfg}, done: map[string]bool{}} },
	})
}

// demoteLongTool demotes once per tool call (program.toolCallDone).
type demoteLongTool struct{ demoter }

func (d *demoteLongTool) wants(r *round, p *program) (LineageQuery, bool) {
	if p.Phase != PhaseActing || p.Lifecycle != LifecycleActive ||
		p.toolCallDone || p.demotedOn != "" || p.lastWorker == "" {
		return LineageQuery{}, false
	}
	if p.actingSince.IsZero() || r.now.Sub(p.actingSince) <= r.e.toolThreshold() {
		return LineageQuery{}, false
	}
	if u, ok := r.view.KVUsage(p.lastWorker); ok && u < d.cfg.DemoteMinKVUsage {
		return LineageQuery{}, false
	}
	return LineageQuery{Session: p.Session, Worker: p.lastWorker}, true
}

func (d *demoteLongTool) propose(r *round, p *program, chains []sessionindex.Chain) {
	if !d.demote(r, p, PolicyDemoteLongTool, chains) {
		p.toolCallDone = true
	}
}

func (d *demoteLongTool) sent(p *program, a Action) {
	p.toolCallDone = true
	d.moved(p, a)
}

func (d *demoteLongTool) outcome(p *program, a Action, res Result) {
	if d.refused(p, a, res) {
		p.toolCallDone = false
	}
}

// demotePaused demotes once per pause.
type demotePaused struct {
	demoter
	done map[string]bool // sessions whose current pause was dealt with
}

func (d *demotePaused) observe(p *program, prev Program) {
	if p.Lifecycle == LifecyclePaused && prev.Lifecycle != LifecyclePaused {
		delete(d.done, p.Session)
	}
}

func (d *demotePaused) wants(_ *round, p *program) (LineageQuery, bool) {
	if p.Lifecycle != LifecyclePaused || d.done[p.Session] || p.demotedOn != "" || p.lastWorker == "" {
		return LineageQuery{}, false
	}
	return LineageQuery{Session: p.Session, Worker: p.lastWorker}, true
}

func (d *demotePaused) propose(r *round, p *program, chains []sessionindex.Chain) {
	if !d.demote(r, p, PolicyDemotePaused, chains) {
		d.done[p.Session] = true
	}
}

func (d *demotePaused) sent(p *program, a Action) {
	d.done[p.Session] = true
	d.moved(p, a)
}

func (d *demotePaused) outcome(p *program, a Action, res Result) {
	if d.refused(p, a, res) {
		delete(d.done, p.Session)
	}
}

func (d *demotePaused) forget(session string) { delete(d.done, session) }

// demoter is what both demote policies share.
type demoter struct {
	hooks
	cfg Config
}

// demote proposes moving what only p holds on its last worker; false when
// there is nothing to move (the decision is made: nothing to do), or true
// once proposed or when the view failed (decide again next round).
func (d demoter) demote(r *round, p *program, policy string, chains []sessionindex.Chain) bool {
	w := p.lastWorker
	if len(chains) == 0 {
		return false // nothing known to demote
	}
	// Only the part no other lineage reaches: demoting a shared system
	// prompt would cost every other session on the worker a reload.
	// Chain.Shared says how much is shared; a plain View's chains may not
	// carry it, so theirs are compared with the other live programs' on the
	// worker too.
	shared := make([]int, len(chains))
	for i, c := range chains {
		shared[i] = c.Shared
	}
	if !r.batch {
		for _, o := range r.e.sortedPrograms() {
			if o == p || o.lastWorker != w || o.Lifecycle == LifecycleTerminated {
				continue
			}
			theirs, ok := r.lineage(o.Session, w)
			if !ok {
				return true
			}
			for i, c := range chains {
				for _, t := range theirs {
					shared[i] = max(shared[i], commonPrefix(c.Blocks, t.Blocks))
				}
			}
		}
	}
	any := false
	for i, c := range chains {
		own := c.Blocks[min(shared[i], len(c.Blocks)):]
		if len(own) == 0 {
			continue
		}
		any = true
		r.propose(p, Action{Policy: policy, Kind: KindDemote, Worker: w, Session: p.Session, Blocks: tail(own, d.cfg.MaxBlocksPerHint), ToTier: d.cfg.DemoteTier})
	}
	return any // false: everything it holds is shared
}

// moved records a demote that went out: the blocks are on a colder tier of
// a.Worker until prefetch_on_resume brings them back. (An engine that
// cannot demote was sent a retain instead: nothing moved, nothing to bring
// back.)
func (demoter) moved(p *program, a Action) {
	if a.Kind == KindDemote {
		p.demotedOn = a.Worker
	}
}

// refused undoes what moved recorded when the engine refused the demote or
// never got it; true when it never got it, and the policy should propose
// it again.
func (demoter) refused(p *program, a Action, res Result) bool {
	if res != ResultRejected && res != ResultError {
		return false
	}
	if p.demotedOn == a.Worker {
		p.demotedOn = ""
	}
	return res == ResultError
}
