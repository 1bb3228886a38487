package hints

import (
	"slices"
	"time"

	"switchyard.dev/pkg/sessionindex"
)

// policy is one hint policy. Each lives in its own file, with the state only
// it needs, and registers itself there (register): adding a policy touches
// that one file.
//
// A round of Decide asks every enabled policy, for every program, whether it
// has something to decide (wants) and whose lineage that takes; reads all of
// those lineages at once; then hands each policy the lineage it asked for
// (propose), and the policy proposes actions. Nothing changes for a proposal
// until the engine admits it: then sent records it (or the worker can act on
// nothing near it, and it is settled as sent and rejected at once), and
// outcome learns from the engine's answer when it comes.
type policy interface {
	// wants reports whether the policy has something to decide for p in
	// this round, and the lineage that takes.
	wants(r *round, p *program) (LineageQuery, bool)
	// propose decides for p, given the chains it asked for, and proposes
	// actions with r.propose.
	propose(r *round, p *program, chains []sessionindex.Chain)
	// sent records that a, which it proposed, went out.
	sent(p *program, a Action)
	// outcome learns from the engine's answer to a; ResultError means it
	// never reached the engine, and the policy should propose it again.
	outcome(p *program, a Action, res Result)
	// observe sees each lifecycle change of p (prev is what p was).
	observe(p *program, prev Program)
	// busy says the policy still has work for p, which has terminated: its
	// record is kept until no enabled policy has.
	busy(p *program) bool
	// forget drops what the policy keeps about a session, workerRemoved
	// what it keeps about a worker that left.
	forget(session string)
	workerRemoved(worker string)
}

// hooks gives a policy no-op observe, busy, forget and workerRemoved.
type hooks struct{}

func (hooks) observe(*program, Program) {}
func (hooks) busy(*program) bool        { return false }
func (hooks) forget(string)             {}
func (hooks) workerRemoved(string)      {}

// policyDef describes a registered policy.
type policyDef struct {
	name, desc string
	// rank orders the policies: lower ranks claim a worker's rate limit and
	// budget first, and are listed first.
	rank int
	// off: disabled by default (DefaultConfig.Disabled).
	off bool
	// phases: the policy follows each turn's phase changes (reasoning,
	// acting), not only lifecycle and placement changes. While no enabled
	// policy does, the engine is not told of them (Config.Unwatched): they
	// are two of every turn's program changes.
	phases bool
	new    func(cfg Config) policy
}

// defs is every policy, by rank.
var defs []policyDef

// register adds a policy; each policy's file calls it from its init, so
// defs is complete before any caller of the package runs.
func register(d policyDef) {
	i, _ := slices.BinarySearchFunc(defs, d.rank, func(p policyDef, r int) int { return p.rank - r })
	defs = slices.Insert(defs, i, d)
}

// candidate is a proposed action and the policy that will record it.
type candidate struct {
	rank   int
	pol    policy
	st     *program
	action Action
}

// round is one Decide: what the policies read and what they propose.
type round struct {
	e     *Engine
	now   time.Time
	view  View
	batch bool // the view answers in batches, with Chain.Shared
	cands []candidate
	cur   int // index in e.pols of the policy proposing
}

// propose adds an action of the current policy for st.
func (r *round) propose(st *program, a Action) {
	r.cands = append(r.cands, candidate{rank: r.cur, pol: r.e.pols[r.cur], st: st, action: a})
}

// lineage reads one lineage outside the round's batch; ok is false when the
// view failed and the decision must wait. Only a view without Shared counts
// needs it (Demote's comparison with the other live programs).
func (r *round) lineage(session, worker string) ([]sessionindex.Chain, bool) {
	chains, err := r.view.Lineage(session, worker)
	if err != nil {
		r.e.stats.LineageFails++
		return nil, false
	}
	return chains, true
}
