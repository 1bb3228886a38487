package hints

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/sessionindex"
)

// Action is one hint for one worker.
type Action struct {
	Policy  string
	Kind    Kind
	Worker  string // the engine that receives the hint
	Session string
	// Blocks root-first; empty for KindRelease (the whole session) and for
	// an engine that takes hints per request (Capability.NextRequests).
	Blocks []kv.BlockHash
	// Share: where the blocks are.
	SourceWorker string
	SourceTier   kv.Tier
	// Prefetch and Demote: destination.
	ToTier kv.Tier
	// Retain: lease length (0: until released) and eviction priority
	// (0..100).
	TTL      time.Duration
	Priority int
}

// View is what the policies read besides lifecycle. The service implements
// it over gRPC; an error means "ask again later", an empty answer means
// "nothing to act on".
//
// A View may also be a BatchView and a SupportView; the services' and the
// replay's are both.
type View interface {
	// Lineage returns session's chains on worker (every worker when worker
	// is ""), root-first. Chains from a plain View may lack Shared (lineage
	// from an indexer that does not report it): the demotes then spare the
	// prefixes of the other live programs on the worker by comparing their
	// chains, at one more lookup each.
	Lineage(session, worker string) ([]sessionindex.Chain, error)
	// KVUsage is the fraction of the worker's GPU KV blocks held by running
	// requests (not by the prefix cache, which a warm worker always fills),
	// if known.
	KVUsage(worker string) (float64, bool)
}

// LineageQuery names one lineage lookup: a session on one worker, or on
// every worker when Worker is "".
type LineageQuery struct{ Session, Worker string }

// BatchView is a View that answers a round's lineage lookups in one read,
// with every chain's Shared count. Decide then calls Lineages once per round
// (not at all when no policy needs lineage) and never Lineage.
type BatchView interface {
	View
	// Lineages answers each query, in order; an error fails them all,
	// except an *UnknownLineages with every answer, which fails only the
	// queries it names.
	Lineages(queries []LineageQuery) ([][]sessionindex.Chain, error)
}

// UnknownLineages is a BatchView's error when some queries could not be
// answered (one session's lineage too large to read) and the rest were:
// the queries at Indexes are unknown, as after a failed read (their
// policies decide again next round), not empty.
type UnknownLineages struct{ Indexes []int }

func (e *UnknownLineages) Error() string {
	return fmt.Sprintf("%d lineage queries could not be answered", len(e.Indexes))
}

// SupportView is a View that knows which hints each worker's engine acts on
// (the shims announce it when they register). Decide then sends each worker
// the Nearest action its engine takes, or nothing.
type SupportView interface {
	View
	HintSupport(worker string) Support
}

// PolicyInfo describes one policy.
type PolicyInfo struct {
	Name, Description string
	Enabled           bool
	Sent              uint64 // actions admitted
	Throttled         uint64 // actions held back by a worker's rate limit or budget
	Unsupported       uint64 // actions not sent: the worker's engine acts on nothing near them
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
	// RetainPriority (0..100) and RetainTTL are the retain an engine that
	// cannot demote is sent in place of a demote (Nearest): keep the
	// session's blocks longer than LRU would, for a while.
	RetainPriority int
	RetainTTL      time.Duration
	// Per worker: hints per second (HintRate, HintBurst) and blocks moved per
	// second (BlockRate, BlockBurst). A zero rate is unlimited.
	HintRate, HintBurst   float64
	BlockRate, BlockBurst float64
	// ForgetAfter drops a program not heard of for this long (while the
	// phases are Unwatched, only a paused one: an active program's turns
	// are not heard of, and its end is, as released or expired; the
	// emitter forgets the programs of a scheduler it has not heard from for
	// this long itself).
	ForgetAfter time.Duration
}

// Forgetting is ForgetAfter, or its default when unset.
func (c Config) Forgetting() time.Duration { return c.withDefaults().ForgetAfter }

// Unwatched are the reasons of the program changes an engine with this
// config does not need (admission.Event's Reason): a turn's phase changes
// (reasoning, acting) while no enabled policy follows them (policyDef.
// phases), nothing otherwise. The emitter asks the scheduler not to send
// them, and the replay does not hand them over, so that both feed the
// engine the same changes. Tool-call durations are learned from the phase
// changes, so while they are unwatched none is (a pause would pass for one)
// and Stats' ToolSamples stays 0.
func (c Config) Unwatched() []string {
	c = c.withDefaults()
	for _, d := range defs {
		if d.phases && !slices.Contains(c.Disabled, d.name) {
			return nil
		}
	}
	return []string{admission.ReasonReasoning, admission.ReasonActing}
}

// DefaultConfig is the one place defaults live. The policies that are off by
// default (Disabled) say so, and why, where they register: today
// demote_long_tool_call (demote.go).
func DefaultConfig() Config {
	return Config{
		Disabled:         defaultDisabled(),
		ToolSamples:      256,
		MinToolSamples:   8,
		DefaultToolTime:  5 * time.Second,
		LongToolFactor:   1,
		DemoteMinKVUsage: 0.5,
		DemoteTier:       kv.TierHost,
		MaxBlocksPerHint: 8192,
		ShareMaxBlocks:   2048,
		RetainPriority:   50,
		RetainTTL:        5 * time.Minute,
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
// zero value is meaningless take their default, while zero rates (unlimited),
// a zero demote threshold (always) and a zero retain priority (the lowest)
// stand.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if reflect.ValueOf(c).IsZero() {
		return d
	}
	orDefault(&c.ToolSamples, d.ToolSamples)
	orDefault(&c.MinToolSamples, d.MinToolSamples)
	orDefault(&c.DefaultToolTime, d.DefaultToolTime)
	orDefault(&c.LongToolFactor, d.LongToolFactor)
	if c.DemoteTier == kv.TierDevice || !c.DemoteTier.Valid() {
		c.DemoteTier = d.DemoteTier
	}
	orDefault(&c.MaxBlocksPerHint, d.MaxBlocksPerHint)
	orDefault(&c.ShareMaxBlocks, d.ShareMaxBlocks)
	orDefault(&c.RetainTTL, d.RetainTTL)
	orDefault(&c.ForgetAfter, d.ForgetAfter)
	return c
}

// orDefault replaces a setting that is not positive with its default.
func orDefault[T int | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func defaultDisabled() []string {
	var out []string
	for _, d := range defs {
		if d.off {
			out = append(out, d.name)
		}
	}
	return out
}

// Validate refuses a configuration the engine could not act on as meant: an
// unknown policy, or a rate whose burst is below one token, which would let
// no hint (or block) through without a word.
func (c Config) Validate() error {
	if err := ParsePolicies(c.Disabled); err != nil {
		return err
	}
	for _, l := range []struct {
		rate, burst string
		r, b        float64
	}{{"--hint-rate", "--hint-burst", c.HintRate, c.HintBurst}, {"--block-rate", "--block-burst", c.BlockRate, c.BlockBurst}} {
		if l.r > 0 && l.b < 1 {
			return fmt.Errorf("%s %v: must be at least 1 while %s is set (%v): no hint could be sent", l.burst, l.b, l.rate, l.r)
		}
	}
	return nil
}

// ParsePolicies checks a list of policy names.
func ParsePolicies(names []string) error {
	for _, n := range names {
		if !slices.ContainsFunc(defs, func(d policyDef) bool { return d.name == n }) {
			return fmt.Errorf("hints: unknown policy %q (known: %s)", n, strings.Join(PolicyNames(), ", "))
		}
	}
	return nil
}

// PolicyNames lists every policy.
func PolicyNames() []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.name
	}
	return out
}

// Stats are engine-wide counters.
type Stats struct {
	Programs     int
	Sent         uint64
	Throttled    uint64
	Unsupported  uint64 // proposals the worker's engine acts on nothing near
	ToolSamples  int
	MedianTool   time.Duration
	LineageFails uint64
}

// Engine runs the policies. Not safe for concurrent use.
type Engine struct {
	cfg      Config
	pols     []policy // as defs
	enabled  []bool
	sent     []uint64
	held     []uint64
	dropped  []uint64
	programs map[string]*program
	tools    *toolTimes
	limits   map[string]*limits // by worker
	stats    Stats
	round    round
	// unwatched is cfg.Unwatched(): non-empty when the engine hears of no
	// turn's phase change.
	unwatched []string
}

// New returns an engine with no programs.
func New(cfg Config) *Engine {
	cfg = cfg.withDefaults()
	n := len(defs)
	e := &Engine{
		cfg: cfg, pols: make([]policy, n), enabled: make([]bool, n),
		sent: make([]uint64, n), held: make([]uint64, n), dropped: make([]uint64, n),
		programs: map[string]*program{}, tools: newToolTimes(cfg.ToolSamples),
		limits: map[string]*limits{}, unwatched: cfg.Unwatched(),
	}
	for i, d := range defs {
		e.pols[i] = d.new(cfg)
		e.enabled[i] = !slices.Contains(cfg.Disabled, d.name)
	}
	return e
}

// Policies describes every policy with its counters.
func (e *Engine) Policies() []PolicyInfo {
	out := make([]PolicyInfo, len(defs))
	for i, d := range defs {
		out[i] = PolicyInfo{Name: d.name, Description: d.desc, Enabled: e.enabled[i], Sent: e.sent[i], Throttled: e.held[i], Unsupported: e.dropped[i]}
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

// Watches says whether the engine needs the program changes of this reason
// (Config.Unwatched).
func (e *Engine) Watches(reason string) bool { return !slices.Contains(e.unwatched, reason) }

// Observe records one lifecycle change of a program.
func (e *Engine) Observe(now time.Time, p Program) {
	if p.Session == "" {
		return
	}
	st := e.programs[p.Session]
	if st == nil {
		st = &program{}
		e.programs[p.Session] = st
	}
	prev := st.Program
	tools := e.tools
	if len(e.unwatched) > 0 {
		tools = nil // no tool call is timed (Unwatched)
	}
	st.observe(now, p, tools)
	for _, pol := range e.pols {
		pol.observe(st, prev)
	}
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
			e.forget(s)
			n++
		}
	}
	return n
}

// forget drops a program and what every policy keeps about it.
func (e *Engine) forget(session string) {
	delete(e.programs, session)
	for _, pol := range e.pols {
		pol.forget(session)
	}
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
	}
	for _, pol := range e.pols {
		pol.workerRemoved(worker)
	}
	delete(e.limits, worker)
}

// Outcome lets the policy that proposed a learn from the engine's answer:
// a demote the engine refused leaves nothing to prefetch; an action that
// never reached the engine (ResultError: worker unknown yet, shim down) is
// undone, so the policy proposes it again at a later Decide, paced by the
// worker's rate limit. (A release whose program is already forgotten is not
// retried: the engine's LRU drops a finished session's blocks anyway.)
func (e *Engine) Outcome(a Action, r Result) {
	st := e.programs[a.Session]
	if st == nil {
		return
	}
	if i := e.index(a.Policy); i >= 0 {
		e.pols[i].outcome(st, a, r)
	}
}

func (e *Engine) index(policy string) int {
	for i, d := range defs {
		if d.name == policy {
			return i
		}
	}
	return -1
}

// Decide evaluates every policy at now and returns the actions admitted by
// each worker's rate limit and budget, releases first. Actions held back
// stay eligible and are tried again at the next Decide. With a SupportView,
// each action is what Nearest makes of it for its worker, and one the
// worker can act on nothing near is not sent (it counts as Unsupported).
func (e *Engine) Decide(now time.Time, view View) []Action {
	_, batch := view.(BatchView)
	r := &e.round // reused: a quiet round allocates nothing
	*r = round{e: e, view: view, now: now, batch: batch, cands: r.cands[:0]}
	defer func() { clear(r.cands); r.view = nil }()
	type ask struct {
		st  *program
		pol int
		q   LineageQuery
	}
	var asks []ask
	// Map order is random; the sort below makes the result deterministic
	// without sorting every program on every tick.
	for s, st := range e.programs {
		if now.Sub(st.lastSeen) > e.cfg.ForgetAfter && (len(e.unwatched) == 0 || st.Lifecycle != LifecycleActive) {
			// Missed its end (a scheduler restart): stop acting on it.
			e.forget(s)
			continue
		}
		for i, pol := range e.pols {
			if !e.enabled[i] {
				continue
			}
			if q, ok := pol.wants(r, st); ok {
				asks = append(asks, ask{st: st, pol: i, q: q})
			}
		}
	}
	qs := make([]LineageQuery, len(asks))
	for i, a := range asks {
		qs[i] = a.q
	}
	chains, ok := e.read(r, qs)
	for i, a := range asks {
		if !ok[i] {
			continue // the view failed: decide again next round
		}
		r.cur = a.pol
		e.pols[a.pol].propose(r, a.st, chains[i])
	}
	cands := r.cands
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].rank != cands[j].rank {
			return cands[i].rank < cands[j].rank
		}
		return cands[i].action.Session < cands[j].action.Session
	})
	sv, _ := view.(SupportView)
	var out []Action
	// A policy's actions for one program go out together or not at all: a
	// policy settles the program when its action is sent (a demoted
	// session is done, a resumed one is back), so sending one chain of
	// several and holding the rest would leave the rest never proposed
	// again. Held back, the whole group stays eligible for a later round.
	for len(cands) > 0 {
		n := 1
		for n < len(cands) && cands[n].rank == cands[0].rank && cands[n].st == cands[0].st {
			n++
		}
		group := make([]candidate, 0, n)
		for _, c := range cands[:n] {
			if sv != nil {
				a, ok := nearestAction(c.action, sv.HintSupport(c.action.Worker), e.cfg)
				if !ok {
					// Nothing near it to send: settled as sent and refused.
					c.pol.sent(c.st, a)
					c.pol.outcome(c.st, a, ResultRejected)
					e.dropped[c.rank]++
					e.stats.Unsupported++
					continue
				}
				c.action = a
			}
			group = append(group, c)
		}
		cands = cands[n:]
		if len(group) == 0 {
			continue
		}
		if !e.admit(now, group) {
			e.held[group[0].rank] += uint64(len(group))
			e.stats.Throttled += uint64(len(group))
			continue
		}
		for _, c := range group {
			a := c.action
			c.pol.sent(c.st, a)
			// Spans alias the view's answer until now: copy only what goes out.
			a.Blocks = slices.Clone(a.Blocks)
			e.sent[c.rank]++
			e.stats.Sent++
			out = append(out, a)
		}
	}
	// A terminated program no policy has work for is done.
	for s, st := range e.programs {
		if st.Lifecycle != LifecycleTerminated {
			continue
		}
		busy := false
		for i, pol := range e.pols {
			busy = busy || (e.enabled[i] && pol.busy(st))
		}
		if !busy {
			e.forget(s)
		}
	}
	return out
}

// read answers the round's lineage queries: one Lineages call with a
// BatchView (each distinct query once), else one Lineage call per distinct
// query. ok[i] is false where the answer to qs[i] failed.
func (e *Engine) read(r *round, qs []LineageQuery) (chains [][]sessionindex.Chain, ok []bool) {
	chains, ok = make([][]sessionindex.Chain, len(qs)), make([]bool, len(qs))
	if len(qs) == 0 {
		return chains, ok
	}
	at := make(map[LineageQuery]int, len(qs)) // query → position in distinct
	var distinct []LineageQuery
	for _, q := range qs {
		if _, seen := at[q]; !seen {
			at[q] = len(distinct)
			distinct = append(distinct, q)
		}
	}
	got := make([][]sessionindex.Chain, len(distinct))
	good := make([]bool, len(distinct))
	if bv, isBatch := r.view.(BatchView); isBatch {
		ans, err := bv.Lineages(distinct)
		var unknown *UnknownLineages
		if (err == nil || errors.As(err, &unknown)) && len(ans) == len(distinct) {
			copy(got, ans)
			for i := range good {
				good[i] = true
			}
			if unknown != nil {
				for _, i := range unknown.Indexes {
					good[i] = false
				}
				e.stats.LineageFails += uint64(len(unknown.Indexes))
			}
		} else {
			e.stats.LineageFails += uint64(len(distinct))
		}
	} else {
		for i, q := range distinct {
			got[i], good[i] = r.lineage(q.Session, q.Worker)
		}
	}
	for i, q := range qs {
		j := at[q]
		chains[i], ok[i] = got[j], good[j]
	}
	return chains, ok
}

// admit takes the hints and blocks a group of actions needs from each of
// their workers' buckets, all or none: false, and nothing is taken, when any
// worker lacks room for its share.
func (e *Engine) admit(now time.Time, group []candidate) bool {
	type need struct{ hints, blocks float64 }
	needs := map[string]*need{}
	for _, c := range group {
		nd := needs[c.action.Worker]
		if nd == nil {
			nd = &need{}
			needs[c.action.Worker] = nd
		}
		nd.hints++
		nd.blocks += float64(len(c.action.Blocks))
	}
	// A group larger than a bucket's burst costs a full bucket: it could
	// never be admitted otherwise.
	for w, nd := range needs {
		l := e.limitsOf(w)
		nd.hints, nd.blocks = min(nd.hints, l.hints.Burst), min(nd.blocks, l.blocks.Burst)
		if l.hints.Available(now) < nd.hints || l.blocks.Available(now) < nd.blocks {
			return false
		}
	}
	for w, nd := range needs {
		l := e.limitsOf(w)
		l.hints.Take(now, nd.hints)
		l.blocks.Take(now, nd.blocks)
	}
	return true
}

// limits are one worker's hint-rate and block-budget buckets.
type limits struct{ hints, blocks *Bucket }

func (e *Engine) limitsOf(worker string) *limits {
	l := e.limits[worker]
	if l == nil {
		l = &limits{hints: NewBucket(e.cfg.HintRate, e.cfg.HintBurst), blocks: NewBucket(e.cfg.BlockRate, e.cfg.BlockBurst)}
		e.limits[worker] = l
	}
	return l
}

// sortedPrograms lists the programs by session.
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

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
