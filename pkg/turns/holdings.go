package turns

import (
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/routing"
)

// Anchor is one full block of a prompt: its position and sequence hash.
type Anchor struct {
	Pos  int
	Hash kv.BlockHash
}

// anchorSpacing: a prompt's anchors are at most 1/anchorSpacing of it
// apart (rounded up to a block), so what its program is found to hold after
// the engine evicted its tail is short by less than that.
const anchorSpacing = 16

// Anchors are the blocks of a prompt (its full blocks' sequence hashes)
// by which its program is later asked about (deepest first): the last, one
// every 1/16 of the prompt back from it, and the first. Engines evict a
// prompt from its tail, and the index forgets a block no tier holds once
// no block it knows extends it: the deepest anchor it still knows is then
// near the end of what is resident.
func Anchors[H ~uint64](hashes []H) []Anchor {
	n := len(hashes)
	if n == 0 {
		return nil
	}
	step := (n + anchorSpacing - 1) / anchorSpacing
	out := make([]Anchor, 0, anchorSpacing+2)
	for i := n - 1; i > 0; i -= step {
		out = append(out, Anchor{Pos: i, Hash: kv.BlockHash(hashes[i])})
	}
	return append(out, Anchor{Pos: 0, Hash: kv.BlockHash(hashes[0])})
}

// prompt names a program's latest prompt to the KV index. Its anchors are
// never changed once kept (a new turn replaces them), so queries share them.
type prompt struct {
	anchors   []Anchor
	blocks    int
	blockSize int
}

// AsksHoldings reports whether admission counts what idle programs hold
// from the KV index (HeldFromIndex).
func (p *Pipeline) AsksHoldings() bool { return p.ctrl != nil && p.ctrl.Config().HeldFromIndex }

// NeedsAnchors reports whether the shell must give t its Anchors: only a
// turn admission decides, and not a session's last, leaves a program idle
// that Holdings will ask about.
func (p *Pipeline) NeedsAnchors(t *Turn) bool { return p.AsksHoldings() && !t.Final && p.Admitted(t) }

// remember keeps a placed turn's anchors for Holdings.
func (p *Pipeline) remember(t Turn) {
	switch {
	case !p.AsksHoldings():
	case len(t.Anchors) == 0: // nothing to ask about: the program counts whole
		delete(p.prompts, t.Key)
	default:
		p.prompts[t.Key] = prompt{anchors: t.Anchors, blocks: t.Blocks, blockSize: t.BlockSize}
	}
}

// HoldingQuery asks the KV index what an idle program still holds on its
// worker: the chain of blocks that ends at the deepest of Anchors the
// index still knows (flashindex.Index.Resident), matched on Worker.
type HoldingQuery struct {
	Key     admission.Key
	Worker  string
	Anchors []Anchor // deepest first, the last one the prompt's first block
	// Since is when the program's tool call began (its PhaseSince when
	// asked), Blocks and BlockSize its latest prompt's full blocks: they go
	// back with the answer (Held).
	Since             time.Time
	Blocks, BlockSize int
}

// Hashes are the query's anchors' block hashes, deepest first: what the
// index is asked about.
func (q *HoldingQuery) Hashes() []kv.BlockHash {
	out := make([]kv.BlockHash, len(q.Anchors))
	for i, a := range q.Anchors {
		out[i] = a.Hash
	}
	return out
}

// Holdings is what the shell asks the KV index before a Tick when
// admission counts what idle programs hold from it (HeldFromIndex): one
// query per ACTIVE program in a tool call whose latest prompt's anchors
// are known. The answers go to Held; a shell whose index cannot answer
// asks nothing, and the programs count their whole working sets.
func (p *Pipeline) Holdings() []HoldingQuery {
	if !p.AsksHoldings() {
		return nil
	}
	var qs []HoldingQuery
	for k, pr := range p.prompts {
		prog, ok := p.ctrl.Get(k)
		if !ok || prog.Lifecycle == admission.Terminated {
			delete(p.prompts, k)
			continue
		}
		if prog.Lifecycle != admission.Active || prog.Phase != admission.Acting || prog.Worker == "" {
			continue
		}
		qs = append(qs, HoldingQuery{Key: k, Worker: prog.Worker, Anchors: pr.anchors, Since: prog.PhaseSince,
			Blocks: pr.blocks, BlockSize: pr.blockSize})
	}
	return qs
}

// HoldingAnswer is the KV index's answer to a HoldingQuery.
type HoldingAnswer struct {
	// Anchor is which of the query's anchors the index matched, and
	// ChainBlocks the length of its chain (0: it knows the chain of none of
	// them, the prompt's first block included).
	Anchor, ChainBlocks int
	// Overlap is the worker's leading blocks of that chain, device first
	// with the host and disk extensions beyond it (the shared pool is not
	// the worker's to hold).
	Overlap routing.Overlap
	// Stale: the index cannot say what the worker holds now: its KV events
	// are too old (the flash indexer's --stale-after), or the index has no
	// entries of it (not followed yet, or reloading its snapshot).
	Stale bool
}

// Held records the index's answer to a HoldingQuery, and reports whether
// it was taken. Dropped, so that the program keeps counting what it counted
// (its whole working set, or what an earlier answer about the same tool
// call said), is an answer that cannot tell: a stale worker; a chain whose
// length is not its anchor's position, or an overlap longer than the chain
// (hashes that do not describe the prompt); and a chain known for none of
// the anchors when no earlier answer about this tool call knew one. Not
// knowing the prompt at all may mean the index never had it (its hashes
// differ from the engine's, the index was full); not knowing it any more,
// after an answer that did, means the engines evicted it from every tier:
// the program holds nothing.
func (p *Pipeline) Held(q HoldingQuery, a HoldingAnswer) bool {
	if p.ctrl == nil || a.Stale {
		return false
	}
	o := a.Overlap
	if a.ChainBlocks == 0 {
		if len(q.Anchors) == 0 || q.Anchors[len(q.Anchors)-1].Pos != 0 {
			return false // the first block unasked: an unknown chain says nothing
		}
		return p.ctrl.Observe(admission.Holding{Key: q.Key, Worker: q.Worker, Since: q.Since, Blocks: q.Blocks,
			BlockSize: q.BlockSize, Gone: true})
	}
	if a.Anchor < 0 || a.Anchor >= len(q.Anchors) || a.ChainBlocks != q.Anchors[a.Anchor].Pos+1 ||
		o.Device+o.HostExt+o.DiskExt > a.ChainBlocks {
		return false
	}
	return p.ctrl.Observe(admission.Holding{Key: q.Key, Worker: q.Worker, Since: q.Since, Blocks: q.Blocks,
		BlockSize: q.BlockSize, Tiers: []int{o.Device, o.HostExt, o.DiskExt}})
}
