package hints

import (
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// PolicyPrefetchResume brings back what a demote moved, once the program
// runs again.
const PolicyPrefetchResume = "prefetch_on_resume"

func init() {
	register(policyDef{
		name: PolicyPrefetchResume, rank: 40,
		desc: "When a program this emitter demoted is resumed or starts its next turn, prefetch its blocks back to GPU; if it now runs on another worker, share them from the old worker's host tier instead.",
		new:  func(cfg Config) policy { return &prefetchResume{cfg: cfg} },
	})
}

type prefetchResume struct {
	hooks
	cfg Config
}

// wants needs no phase changes of its own (policyDef.phases): a program
// demoted by demote_long_tool_call (which follows them) comes back by its
// next turn's REASONING, one demoted by demote_paused by its resume.
func (f *prefetchResume) wants(_ *round, p *program) (LineageQuery, bool) {
	if p.demotedOn == "" || p.Lifecycle != LifecycleActive || (p.Phase != PhaseReasoning && !p.resumed) {
		return LineageQuery{}, false
	}
	return LineageQuery{Session: p.Session, Worker: p.demotedOn}, true
}

func (f *prefetchResume) propose(r *round, p *program, chains []sessionindex.Chain) {
	target := p.Worker
	if target == "" {
		target = p.lastWorker
	}
	from := p.demotedOn
	if len(chains) == 0 {
		f.back(p)
	}
	for _, c := range chains {
		blocks := head(c.Blocks, f.cfg.MaxBlocksPerHint)
		a := Action{Policy: PolicyPrefetchResume, Kind: KindPrefetch, Worker: from, Session: p.Session, Blocks: blocks, ToTier: kv.TierDevice}
		if target != "" && target != from {
			// It runs elsewhere now: the new worker takes the blocks from
			// the old one's colder tier.
			a = Action{Policy: PolicyPrefetchResume, Kind: KindShare, Worker: target, Session: p.Session, Blocks: blocks, SourceWorker: from, SourceTier: f.cfg.DemoteTier}
		}
		r.propose(p, a)
	}
}

// back: the blocks are back (or there is nothing to bring back), and this
// tool call needs no second demote.
func (f *prefetchResume) back(p *program) {
	p.demotedOn, p.resumed, p.toolCallDone = "", false, true
}

func (f *prefetchResume) sent(p *program, _ Action) { f.back(p) }

func (f *prefetchResume) outcome(p *program, a Action, res Result) {
	if res != ResultError {
		return
	}
	// Never arrived: the blocks are still where the demote put them.
	p.demotedOn, p.resumed = a.Worker, true
	if a.Kind == KindShare {
		p.demotedOn = a.SourceWorker
	}
}
