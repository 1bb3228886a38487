package hints

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// Phase is what a program is doing (scheduler ProgramPhase).
type Phase uint8

const (
	PhaseUnknown Phase = iota
	PhaseReasoning
	PhaseActing
)

// Lifecycle is whether a program may hold KV (scheduler ProgramLifecycle).
type Lifecycle uint8

const (
	LifecycleUnknown Lifecycle = iota
	LifecycleActive
	LifecyclePaused
	LifecycleTerminated
)

// Program is one lifecycle observation of an agent session.
type Program struct {
	Session    string
	Parent     string // parent session of a sub-agent
	Phase      Phase
	Lifecycle  Lifecycle
	Worker     string // empty when paused or not placed
	PhaseSince time.Time
}

// Kind is the type of a hint action.
type Kind uint8

const (
	KindShare Kind = iota + 1
	KindPrefetch
	KindDemote
	KindPin
	KindRetain
	KindRelease
)

func (k Kind) String() string {
	switch k {
	case KindShare:
		return "share"
	case KindPrefetch:
		return "prefetch"
	case KindDemote:
		return "demote"
	case KindPin:
		return "pin"
	case KindRetain:
		return "retain"
	case KindRelease:
		return "release_session"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Action is one hint for one worker.
type Action struct {
	Policy  string
	Kind    Kind
	Worker  string // the engine that receives the hint
	Session string
	// Blocks root-first; empty for KindRelease (the whole session).
	Blocks []kv.BlockHash
	// Share: where the blocks are.
	SourceWorker string
	SourceTier   kv.Tier
	// Prefetch and Demote: destination.
	ToTier kv.Tier
	// Pin and Retain: lease length; Retain: eviction priority (0..100).
	TTL      time.Duration
	Priority int
}

// Result is an engine's answer to one action.
type Result uint8

const (
	ResultAccepted Result = iota + 1
	ResultClipped
	ResultDeferred
	ResultRejected
	ResultError // never reached the engine
)

// View is what the policies read besides lifecycle. The service implements
// it over gRPC; an error means "ask again later", an empty answer means
// "nothing to act on".
type View interface {
	// Lineage returns session's chains on worker (every worker when worker
	// is ""), root-first.
	Lineage(session, worker string) ([]sessionindex.Chain, error)
	// KVUsage is the fraction of the worker's GPU KV blocks held by running
	// requests (not by the prefix cache, which a warm worker always fills),
	// if known.
	KVUsage(worker string) (float64, bool)
}

// Policy names.
const (
	PolicyReleaseFinished = "release_finished"
	PolicyDemoteLongTool  = "demote_long_tool_call"
	PolicyDemotePaused    = "demote_paused"
	PolicyPrefetchResume  = "prefetch_on_resume"
	PolicyShareSubagent   = "share_subagent_prefix"
)

// PolicyInfo describes one policy.
type PolicyInfo struct {
	Name, Description string
	Enabled           bool
	Sent              uint64 // actions admitted
	Throttled         uint64 // actions held back by a worker's rate limit or budget
}

// policies, in the order they claim a worker's rate limit and budget:
// releasing a finished session frees what the others need.
var policies = []struct{ name, desc string }{
	{PolicyReleaseFinished, "When a program terminates, tell every worker holding its lineage that the session is finished, so its blocks are evicted before anyone else's."},
	{PolicyDemoteLongTool, "When a program has been in a tool call (ACTING) longer than the recent median tool time (times LongToolFactor), demote the blocks only it holds on its worker to host memory instead of letting LRU drop them, if running requests hold more of the GPU than the demote threshold. Off by default: it only pays on engines that drop what they evict."},
	{PolicyDemotePaused, "When admission control pauses a program, demote the blocks only it holds on its last worker to host memory."},
	{PolicyPrefetchResume, "When a program this emitter demoted is resumed or starts its next turn, prefetch its blocks back to GPU; if it now runs on another worker, share them from the old worker's host tier instead."},
	{PolicyShareSubagent, "When a sub-agent is placed on another worker than its parent, share the root of the parent's lineage (system prompt, tools, context) from the parent's worker."},
}

// Config tunes an Engine. The zero value means DefaultConfig.
type Config struct {
	// Disabled lists policies that never fire.
	Disabled []string
	// ToolSamples is how many recent tool-call durations the median uses;
	// below MinToolSamples the DefaultToolTime stands in for it.
	ToolSamples     int
	MinToolSamples  int
	DefaultToolTime time.Duration
	// LongToolFactor scales the median: a tool call is long once it has
	// lasted LongToolFactor × median. 1 is the rule; larger values
	// demote fewer, surer cases.
	LongToolFactor float64
	// DemoteMinKVUsage: demote only when running requests hold at least
	// this fraction (0..1) of the worker's GPU KV blocks; with less, room is
	// not short and demoting only costs PCIe.
	// Unknown usage counts as pressure.
	DemoteMinKVUsage float64
	DemoteTier       kv.Tier
	// MaxBlocksPerHint caps a span: a demote keeps the deepest blocks (the
	// session's own), a prefetch or share the root-most (the reusable prefix).
	MaxBlocksPerHint int
	// ShareMaxBlocks caps what a sub-agent is offered of its parent's chain.
	ShareMaxBlocks int
	// Per worker: hints per second (HintRate, HintBurst) and blocks moved per
	// second (BlockRate, BlockBurst). A zero rate is unlimited.
	HintRate, HintBurst   float64
	BlockRate, BlockBurst float64
	// ForgetAfter drops a program not heard of for this long.
	ForgetAfter time.Duration
}

// DefaultConfig is the one place defaults live.
//
// demote_long_tool_call is off by default: on an engine that already
// offloads what it evicts to host memory (the simulated engine, vLLM with a
// CPU offload connector), demoting early only empties GPU blocks while it
// pushes other sessions out of host memory. BenchmarkHintsEffect (one
// worker, 60 agents, effect_test.go) measured, against no hints, −19% to
// −26% re-prefilled tokens with these defaults and +6% to +13% with every
// policy on (seeds 1–4). Enable it for engines that drop what they evict.
func DefaultConfig() Config {
	return Config{
		Disabled:         []string{PolicyDemoteLongTool},
		ToolSamples:      256,
		MinToolSamples:   8,
		DefaultToolTime:  5 * time.Second,
		LongToolFactor:   1,
		DemoteMinKVUsage: 0.5,
		DemoteTier:       kv.TierHost,
		MaxBlocksPerHint: 8192,
		ShareMaxBlocks:   2048,
		HintRate:         20,
		HintBurst:        40,
		// 2 MiB blocks (Llama-3.1-8B, 16 tokens) at ~32 GB/s of PCIe
		// left for hints: ~16k blocks a second.
		BlockRate:   16384,
		BlockBurst:  32768,
		ForgetAfter: time.Hour,
	}
}

// withDefaults: the zero Config is DefaultConfig; in any other, fields whose
// zero value is meaningless take their default, while zero rates (unlimited)
// and a zero demote threshold (always) stand.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if reflect.ValueOf(c).IsZero() {
		return d
	}
	if c.ToolSamples <= 0 {
		c.ToolSamples = d.ToolSamples
	}
	if c.MinToolSamples <= 0 {
		c.MinToolSamples = d.MinToolSamples
	}
	if c.DefaultToolTime <= 0 {
		c.DefaultToolTime = d.DefaultToolTime
	}
	if c.LongToolFactor <= 0 {
		c.LongToolFactor = d.LongToolFactor
	}
	if c.DemoteTier == kv.TierDevice || !c.DemoteTier.Valid() {
		c.DemoteTier = d.DemoteTier
	}
	if c.MaxBlocksPerHint <= 0 {
		c.MaxBlocksPerHint = d.MaxBlocksPerHint
	}
	if c.ShareMaxBlocks <= 0 {
		c.ShareMaxBlocks = d.ShareMaxBlocks
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = d.ForgetAfter
	}
	return c
}

// ParsePolicies checks a list of policy names.
func ParsePolicies(names []string) error {
	for _, n := range names {
		if !slices.ContainsFunc(policies, func(p struct{ name, desc string }) bool { return p.name == n }) {
			return fmt.Errorf("hints: unknown policy %q (known: %s)", n, strings.Join(PolicyNames(), ", "))
		}
	}
	return nil
}

// PolicyNames lists every policy.
func PolicyNames() []string {
	out := make([]string, len(policies))
	for i, p := range policies {
		out[i] = p.name
	}
	return out
}

type program struct {
	Program
	lastWorker  string // the last worker it was placed on
	lastSeen    time.Time
	actingSince time.Time
	// demotedOn is the worker this emitter demoted the session on and has
	// not prefetched back yet ("" if none).
	demotedOn    string
	longDemoted  bool // this tool call's demote was decided
	pauseDemoted bool // this pause's demote was decided
	resumed      bool // PAUSED → ACTIVE since the demote
	sharedTo     map[string]bool
	releasedOn   map[string]bool // workers told it is finished
	released     bool            // every worker was told
}

// Stats are engine-wide counters.
type Stats struct {
	Programs     int
	Sent         uint64
	Throttled    uint64
	ToolSamples  int
	MedianTool   time.Duration
	LineageFails uint64
}

// Engine runs the policies. Not safe for concurrent use.
type Engine struct {
	cfg      Config
	enabled  map[string]bool
	sent     map[string]uint64
	held     map[string]uint64
	programs map[string]*program
	tools    *toolTimes
	hintRate map[string]*Bucket
	blockBud map[string]*Bucket
	stats    Stats
}

// New returns an engine with no programs.
func New(cfg Config) *Engine {
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg: cfg, enabled: map[string]bool{}, sent: map[string]uint64{}, held: map[string]uint64{},
		programs: map[string]*program{}, tools: newToolTimes(cfg.ToolSamples),
		hintRate: map[string]*Bucket{}, blockBud: map[string]*Bucket{},
	}
	for _, p := range policies {
		e.enabled[p.name] = !slices.Contains(cfg.Disabled, p.name)
	}
	return e
}

// Policies describes every policy with its counters.
func (e *Engine) Policies() []PolicyInfo {
	out := make([]PolicyInfo, len(policies))
	for i, p := range policies {
		out[i] = PolicyInfo{Name: p.name, Description: p.desc, Enabled: e.enabled[p.name], Sent: e.sent[p.name], Throttled: e.held[p.name]}
	}
	return out
}

// Stats returns counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Programs = len(e.programs)
	s.ToolSamples = e.tools.count()
	s.MedianTool = e.toolThreshold()
	return s
}

// toolThreshold is how long a tool call must last to count as long.
func (e *Engine) toolThreshold() time.Duration {
	if e.tools.count() < e.cfg.MinToolSamples {
		return e.cfg.DefaultToolTime
	}
	return time.Duration(float64(e.tools.median()) * e.cfg.LongToolFactor)
}

// Observe records one lifecycle change of a program.
func (e *Engine) Observe(now time.Time, p Program) {
	if p.Session == "" {
		return
	}
	st := e.programs[p.Session]
	if st == nil {
		st = &program{sharedTo: map[string]bool{}, releasedOn: map[string]bool{}}
		e.programs[p.Session] = st
	}
	prev := st.Program
	st.lastSeen = now
	since := p.PhaseSince
	if since.IsZero() || since.After(now) {
		since = now
	}
	if prev.Phase == PhaseActing && p.Phase != PhaseActing && !st.actingSince.IsZero() {
		// A tool call ended: its length teaches what "long" means.
		e.tools.add(now.Sub(st.actingSince))
		st.actingSince = time.Time{}
	}
	if p.Phase == PhaseActing && (prev.Phase != PhaseActing || st.actingSince.IsZero()) {
		st.actingSince = since
		st.longDemoted = false
	}
	if p.Lifecycle == LifecyclePaused && prev.Lifecycle != LifecyclePaused {
		st.pauseDemoted = false
	}
	if prev.Lifecycle == LifecyclePaused && p.Lifecycle == LifecycleActive {
		st.resumed = true
	}
	if p.Worker != "" {
		st.lastWorker = p.Worker
	}
	st.Program = p
}

// Resync forgets the programs that are not in live, the sessions of the
// scheduler's table when a program watch (re)started: the scheduler dropped
// them, or restarted, while nobody was watching. As with ForgetAfter, their
// end was missed, so nothing more is done for them. It returns how many
// were forgotten.
func (e *Engine) Resync(live map[string]bool) int {
	n := 0
	for s := range e.programs {
		if !live[s] {
			delete(e.programs, s)
			n++
		}
	}
	return n
}

// WorkerRemoved forgets hints pending against a worker that left.
func (e *Engine) WorkerRemoved(worker string) {
	for _, st := range e.programs {
		if st.demotedOn == worker {
			st.demotedOn = ""
		}
		if st.lastWorker == worker {
			st.lastWorker = ""
		}
		delete(st.sharedTo, worker)
	}
	delete(e.hintRate, worker)
	delete(e.blockBud, worker)
}

// Outcome lets the policies learn from an engine's answer. A demote the
// engine refused leaves nothing to prefetch. An action that never reached
// the engine (ResultError: worker unknown yet, shim down) is undone, so the
// policy fires again at a later Decide, paced by the worker's rate limit.
// (A release whose program is already forgotten is not retried: the
// engine's LRU drops a finished session's blocks anyway.)
func (e *Engine) Outcome(a Action, r Result) {
	st := e.programs[a.Session]
	if st == nil {
		return
	}
	switch {
	case a.Kind == KindDemote && r == ResultRejected:
		if st.demotedOn == a.Worker {
			st.demotedOn = ""
		}
	case r != ResultError:
	case a.Kind == KindDemote:
		if st.demotedOn == a.Worker {
			st.demotedOn = ""
		}
		switch a.Policy {
		case PolicyDemoteLongTool:
			st.longDemoted = false
		case PolicyDemotePaused:
			st.pauseDemoted = false
		}
	case a.Policy == PolicyPrefetchResume:
		st.demotedOn, st.resumed = a.Worker, true
		if a.Kind == KindShare {
			st.demotedOn = a.SourceWorker
		}
	case a.Policy == PolicyShareSubagent:
		delete(st.sharedTo, a.Worker)
	case a.Kind == KindRelease:
		delete(st.releasedOn, a.Worker)
		st.released = false
	}
}

// candidate is an action with the state change to make if it is admitted.
type candidate struct {
	rank   int
	action Action
	commit func()
}

// Decide evaluates every policy at now and returns the actions admitted by
// each worker's rate limit and budget, releases first. Actions held back
// stay eligible and are tried again at the next Decide.
func (e *Engine) Decide(now time.Time, view View) []Action {
	var cands []candidate
	// Map order is random; the sort below makes the result deterministic
	// without sorting every program on every tick.
	for s, st := range e.programs {
		if now.Sub(st.lastSeen) > e.cfg.ForgetAfter {
			// Missed its end (a scheduler restart): stop acting on it.
			delete(e.programs, s)
			continue
		}
		cands = e.evaluate(now, st, view, cands)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].rank != cands[j].rank {
			return cands[i].rank < cands[j].rank
		}
		return cands[i].action.Session < cands[j].action.Session
	})
	var out []Action
	for _, c := range cands {
		if !e.admit(now, c.action) {
			e.held[c.action.Policy]++
			e.stats.Throttled++
			continue
		}
		if c.commit != nil {
			c.commit()
		}
		// Spans alias the view's answer until now: copy only what goes out.
		c.action.Blocks = slices.Clone(c.action.Blocks)
		e.sent[c.action.Policy]++
		e.stats.Sent++
		out = append(out, c.action)
	}
	// A terminated program whose releases all went out (or are not
	// wanted) has nothing left to do.
	for s, st := range e.programs {
		if st.Lifecycle != LifecycleTerminated {
			continue
		}
		if st.released || !e.enabled[PolicyReleaseFinished] {
			delete(e.programs, s)
		}
	}
	return out
}

func (e *Engine) admit(now time.Time, a Action) bool {
	hr := e.hintRate[a.Worker]
	if hr == nil {
		hr = NewBucket(e.cfg.HintRate, e.cfg.HintBurst)
		e.hintRate[a.Worker] = hr
	}
	bb := e.blockBud[a.Worker]
	if bb == nil {
		bb = NewBucket(e.cfg.BlockRate, e.cfg.BlockBurst)
		e.blockBud[a.Worker] = bb
	}
	n := float64(len(a.Blocks))
	if hr.Available(now) < 1 || bb.Available(now) < n {
		return false
	}
	hr.Take(now, 1)
	bb.Take(now, n)
	return true
}

func (e *Engine) rank(policy string) int {
	for i, p := range policies {
		if p.name == policy {
			return i
		}
	}
	return len(policies)
}

// lineage fetches session's chains on worker; ok is false when the view
// failed and the decision must wait.
func (e *Engine) lineage(view View, session, worker string) ([]sessionindex.Chain, bool) {
	chains, err := view.Lineage(session, worker)
	if err != nil {
		e.stats.LineageFails++
		return nil, false
	}
	return chains, true
}

func (e *Engine) evaluate(now time.Time, st *program, view View, cands []candidate) []candidate {
	add := func(a Action, commit func()) {
		cands = append(cands, candidate{rank: e.rank(a.Policy), action: a, commit: commit})
	}
	s := st.Session
	switch {
	case st.Lifecycle == LifecycleTerminated:
		if st.released || !e.enabled[PolicyReleaseFinished] {
			return cands
		}
		// Every worker the session touched: its current one, where it was
		// demoted, and any worker its lineage names.
		workers := map[string]bool{}
		for _, w := range []string{st.lastWorker, st.demotedOn} {
			if w != "" {
				workers[w] = true
			}
		}
		chains, ok := e.lineage(view, s, "")
		if !ok {
			return cands
		}
		for _, c := range chains {
			workers[c.Worker] = true
		}
		if len(workers) == 0 {
			st.released = true
			return cands
		}
		var pending []string
		for _, w := range sortedKeys(workers) {
			if !st.releasedOn[w] {
				pending = append(pending, w)
			}
		}
		if len(pending) == 0 {
			st.released = true
			return cands
		}
		left := len(pending)
		for _, w := range pending {
			add(Action{Policy: PolicyReleaseFinished, Kind: KindRelease, Worker: w, Session: s}, func() {
				st.releasedOn[w] = true
				if left--; left == 0 {
					st.released = true
				}
			})
		}
		return cands

	case st.Lifecycle == LifecyclePaused:
		if st.pauseDemoted || st.demotedOn != "" || !e.enabled[PolicyDemotePaused] || st.lastWorker == "" {
			return cands
		}
		e.demote(st, PolicyDemotePaused, view, &st.pauseDemoted, add)
		return cands

	case st.Phase == PhaseActing && st.Lifecycle == LifecycleActive:
		if st.longDemoted || st.demotedOn != "" || !e.enabled[PolicyDemoteLongTool] || st.lastWorker == "" {
			break
		}
		if st.actingSince.IsZero() || now.Sub(st.actingSince) <= e.toolThreshold() {
			break
		}
		if u, ok := view.KVUsage(st.lastWorker); ok && u < e.cfg.DemoteMinKVUsage {
			break
		}
		e.demote(st, PolicyDemoteLongTool, view, &st.longDemoted, add)
	}

	// Prefetch back what was demoted, once the program runs again.
	if st.demotedOn != "" && e.enabled[PolicyPrefetchResume] && st.Lifecycle == LifecycleActive &&
		(st.Phase == PhaseReasoning || st.resumed) {
		target := st.Worker
		if target == "" {
			target = st.lastWorker
		}
		from := st.demotedOn
		if chains, ok := e.lineage(view, s, from); ok {
			// Once it is back, this tool call needs no second demote.
			done := func() { st.demotedOn, st.resumed, st.longDemoted = "", false, true }
			if len(chains) == 0 {
				done()
			}
			for _, c := range chains {
				a := Action{Policy: PolicyPrefetchResume, Kind: KindPrefetch, Worker: from, Session: s, Blocks: head(c.Blocks, e.cfg.MaxBlocksPerHint), ToTier: kv.TierDevice}
				if target != "" && target != from {
					a = Action{Policy: PolicyPrefetchResume, Kind: KindShare, Worker: target, Session: s, Blocks: head(c.Blocks, e.cfg.MaxBlocksPerHint), SourceWorker: from, SourceTier: e.cfg.DemoteTier}
				}
				add(a, done)
			}
		}
	}

	// Share the parent's prefix with a sub-agent on another worker.
	if st.Parent != "" && st.Worker != "" && !st.sharedTo[st.Worker] && e.enabled[PolicyShareSubagent] {
		parent := e.programs[st.Parent]
		if parent != nil && parent.lastWorker != "" && parent.lastWorker != st.Worker {
			if chains, ok := e.lineage(view, st.Parent, parent.lastWorker); ok {
				target := st.Worker
				done := func() { st.sharedTo[target] = true }
				longest := longestChain(chains)
				if len(longest) == 0 {
					done()
				} else {
					add(Action{Policy: PolicyShareSubagent, Kind: KindShare, Worker: target, Session: s,
						Blocks: head(longest, min(e.cfg.ShareMaxBlocks, e.cfg.MaxBlocksPerHint)), SourceWorker: parent.lastWorker, SourceTier: kv.TierDevice}, done)
				}
			}
		}
	}
	return cands
}

func (e *Engine) demote(st *program, policy string, view View, decided *bool, add func(Action, func())) {
	w := st.lastWorker
	chains, ok := e.lineage(view, st.Session, w)
	if !ok {
		return
	}
	if len(chains) == 0 {
		*decided = true // nothing known to demote
		return
	}
	// Only the part no other lineage reaches: demoting a shared system
	// prompt would cost every other session on the worker a reload. The
	// index says how much is shared when it can (Chain.Shared); a lineage
	// that came over the wire does not carry it, so the chains of the other
	// live programs on the worker are compared too.
	shared := make([]int, len(chains))
	for i, c := range chains {
		shared[i] = c.Shared
	}
	for _, o := range e.sortedPrograms() {
		if o == st || o.lastWorker != w || o.Lifecycle == LifecycleTerminated {
			continue
		}
		theirs, ok := e.lineage(view, o.Session, w)
		if !ok {
			return
		}
		for i, c := range chains {
			for _, t := range theirs {
				shared[i] = max(shared[i], commonPrefix(c.Blocks, t.Blocks))
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
		add(Action{Policy: policy, Kind: KindDemote, Worker: w, Session: st.Session, Blocks: tail(own, e.cfg.MaxBlocksPerHint), ToTier: e.cfg.DemoteTier}, func() {
			*decided = true
			st.demotedOn = w
		})
	}
	if !any {
		*decided = true // everything it holds is shared
	}
}

func (e *Engine) sortedPrograms() []*program {
	out := make([]*program, 0, len(e.programs))
	for _, p := range e.programs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Session < out[j].Session })
	return out
}

func commonPrefix(a, b []kv.BlockHash) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func head(c []kv.BlockHash, n int) []kv.BlockHash {
	if len(c) > n {
		c = c[:n]
	}
	return c
}

func tail(c []kv.BlockHash, n int) []kv.BlockHash {
	if len(c) > n {
		c = c[len(c)-n:]
	}
	return c
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

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
