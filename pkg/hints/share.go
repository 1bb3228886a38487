package hints

import (
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// PolicyShareSubagent offers a sub-agent placed away from its parent the
// parent's prefix.
const PolicyShareSubagent = "share_subagent_prefix"

func init() {
	register(policyDef{
		name: PolicyShareSubagent, rank: 50,
		desc: "When a sub-agent is placed on another worker than its parent, share the root of the parent's lineage (system prompt, tools, context) from the parent's worker.",
		new:  func(cfg Config) policy { return &shareSubagent{cfg: cfg, sharedTo: map[string]map[string]bool{}} },
	})
}

type shareSubagent struct {
	hooks
	cfg      Config
	sharedTo map[string]map[string]bool // session → workers it was offered its parent's prefix on
}

// parentWorker is where p's parent ran last, when p runs on another worker
// and has not been offered the parent's prefix there yet.
func (s *shareSubagent) parentWorker(r *round, p *program) (string, bool) {
	if p.Lifecycle == LifecycleTerminated || p.Lifecycle == LifecyclePaused ||
		p.Parent == "" || p.Worker == "" || s.sharedTo[p.Session][p.Worker] {
		return "", false
	}
	parent := r.e.programs[p.Parent]
	if parent == nil || parent.lastWorker == "" || parent.lastWorker == p.Worker {
		return "", false
	}
	return parent.lastWorker, true
}

func (s *shareSubagent) wants(r *round, p *program) (LineageQuery, bool) {
	w, ok := s.parentWorker(r, p)
	if !ok {
		return LineageQuery{}, false
	}
	return LineageQuery{Session: p.Parent, Worker: w}, true
}

func (s *shareSubagent) propose(r *round, p *program, chains []sessionindex.Chain) {
	from, ok := s.parentWorker(r, p)
	if !ok {
		return
	}
	longest := longestChain(chains)
	if len(longest) == 0 {
		s.mark(p.Session, p.Worker)
		return
	}
	r.propose(p, Action{Policy: PolicyShareSubagent, Kind: KindShare, Worker: p.Worker, Session: p.Session,
		Blocks: head(longest, min(s.cfg.ShareMaxBlocks, s.cfg.MaxBlocksPerHint)), SourceWorker: from, SourceTier: kv.TierDevice})
}

func (s *shareSubagent) mark(session, worker string) {
	m := s.sharedTo[session]
	if m == nil {
		m = map[string]bool{}
		s.sharedTo[session] = m
	}
	m[worker] = true
}

func (s *shareSubagent) sent(p *program, a Action) { s.mark(p.Session, a.Worker) }

func (s *shareSubagent) outcome(p *program, a Action, res Result) {
	if res == ResultError {
		delete(s.sharedTo[p.Session], a.Worker)
	}
}

func (s *shareSubagent) forget(session string) { delete(s.sharedTo, session) }

func (s *shareSubagent) workerRemoved(worker string) {
	for _, m := range s.sharedTo {
		delete(m, worker)
	}
}

func longestChain(chains []sessionindex.Chain) []kv.BlockHash {
	var best []kv.BlockHash
	for _, c := range chains {
		if len(c.Blocks) > len(best) {
			best = c.Blocks
		}
	}
	return best
}
