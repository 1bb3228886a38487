package turns

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/routing"
)

// Config builds a Pipeline.
type Config struct {
	Routing routing.Config
	// Admission configures admission control for the turns whose policy is
	// session_aware; nil runs none (every turn is admitted at once).
	Admission *admission.Config
	// Rand is the router's random source (tie breaks): TieBreaks.
	Rand routing.Rand
}

// TieBreaks is the random source a pipeline breaks routing ties with, for
// its seed and its scheduler replica: the scheduler service's (--seed, as
// replica 0) and replay's (--seed; one stream per simulated replica) are
// this one, so a replay and one scheduler seeded alike (not --seed 0,
// which picks a seed at random) break ties alike among the same candidates
// in the same order (the registry's, by worker id).
func TieBreaks(seed uint64, replica int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x5eed+uint64(replica)))
}

// Pipeline owns the routing and admission cores of one scheduler.
type Pipeline struct {
	router *routing.Router
	ctrl   *admission.Controller
	policy routing.Policy

	cands   []routing.Candidate // scratch of Place (restrict)
	kept    []routing.Candidate // scratch of Place (exclude)
	allowed map[string]bool     // scratch of Place

	// base is each worker's whole capacity as admission counts it, what
	// Share divides among replicas.
	base map[string]admission.Capacity
	// shared: the capacities admission holds are shares, not base.
	shared bool
	// baseGen counts the changes to base; shareVersion is the version
	// Share last gave admission, for the base at shareBase and the others'
	// uses at shareOthers (admission.SetShares).
	baseGen, shareVersion, shareBase, shareOthers uint64
	// routed are the sessions routed here within inheritHorizon: a
	// continued turn of a session not among them is inherited.
	routed recentSessions
	// prompts is each admitted session's latest prompt, by its anchors,
	// for Holdings.
	prompts map[admission.Key]prompt
}

// inheritHorizon is how long a pipeline remembers routing a session at
// least (at most twice as long: recentSessions): a session idle for longer
// that comes back is taken as inherited (placed by the index) rather than
// as this pipeline's own.
const inheritHorizon = 24 * time.Hour

// New returns a pipeline with no programs and no in-flight turns.
func New(cfg Config) (*Pipeline, error) {
	r, err := routing.New(&cfg.Routing, cfg.Rand)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{router: r, policy: r.Config().Policy, allowed: map[string]bool{}, base: map[string]admission.Capacity{},
		routed: newRecentSessions(), prompts: map[admission.Key]prompt{}}
	if cfg.Admission != nil {
		if p.ctrl, err = admission.New(cfg.Admission); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Router is the routing core, for reads (load, bindings).
func (p *Pipeline) Router() *routing.Router { return p.router }

// Controller is the admission core, nil without admission control.
func (p *Pipeline) Controller() *admission.Controller { return p.ctrl }

// SetWorker adds a worker to admission control or updates its capacity:
// its KV tokens per tier (device first), of which admission counts the
// tiers its configuration says, and its most running requests.
func (p *Pipeline) SetWorker(id string, tierTokens []int64, maxRunning int) {
	if p.ctrl == nil {
		return
	}
	c := admission.Capacity{Tokens: p.ctrl.Config().CountedTokens(tierTokens...), MaxPrograms: maxRunning}
	p.base[id] = c
	p.baseGen++
	p.ctrl.SetWorker(id, c)
}

// Share makes admission decide, on every worker, with this pipeline's share
// of it among replicas pipelines that own disjoint sets of programs
// (admission.SetShares): others is what the other replicas' programs use on
// a worker, as last heard, and othersVersion changes whenever they do (0:
// unknown, every worker's share is computed again). With one replica every
// worker's capacity is whole again (the others may have left).
func (p *Pipeline) Share(others func(worker string) admission.Use, replicas int, othersVersion uint64) {
	if p.ctrl == nil || replicas <= 1 && !p.shared {
		return
	}
	p.shared = replicas > 1
	if p.shared {
		version := uint64(0)
		if othersVersion != 0 {
			if p.shareVersion == 0 || othersVersion != p.shareOthers || p.baseGen != p.shareBase {
				p.shareVersion++
				p.shareOthers, p.shareBase = othersVersion, p.baseGen
			}
			version = p.shareVersion
		}
		p.ctrl.SetShares(p.base, others, replicas, version)
		return
	}
	p.ctrl.Unshare()
	for id, c := range p.base {
		p.ctrl.SetWorker(id, c)
	}
}

// UsesOf is what this pipeline's programs use on each of workers, what it
// tells the other replicas.
func (p *Pipeline) UsesOf(workers []string) []admission.Use {
	if p.ctrl == nil {
		return make([]admission.Use, len(workers))
	}
	return p.ctrl.UsesOf(workers)
}

// Reported records that a worker's load report is fresh (a heartbeat, a
// registration; in replay, every read of an engine's load): the turns the
// router freed before it are no longer counted out of it.
func (p *Pipeline) Reported(worker string) { p.router.Reported(worker) }

// ReportedAt records a worker's load report sampled at sampled or later (a
// heartbeat, which arrives after the shim took its sample): the turns freed
// since sampled may still be in it, and stay taken out of it.
func (p *Pipeline) ReportedAt(worker string, sampled time.Time) { p.router.ReportedAt(worker, sampled) }

// Running records that worker still runs the requests ids at now (its
// heartbeat names those it has run long): a turn that runs longer than
// routing.Config.StaleRequestAfter keeps its load while it runs, and only a
// turn its worker no longer runs (its finish lost) is swept as stale.
func (p *Pipeline) Running(now time.Time, worker string, ids []string) {
	p.router.Running(now, worker, ids)
}

// Turn is one request of a session asking to be scheduled.
type Turn struct {
	RequestID       string
	Key             admission.Key
	ParentSessionID string
	PromptTokens    int
	Blocks          int // the prompt's full KV blocks
	BlockSize       int
	// Final: the client marked it the session's last request.
	Final bool
	// Policy overrides the pipeline's routing policy for this turn.
	Policy routing.Policy
	// Exclude are workers the turn already failed on before its first
	// token (the frontend migrating it): Place never chooses one of them.
	Exclude []string
	// Anchors are some of the prompt's full blocks (Anchors), by which the
	// KV index is later asked what the program still holds (Holdings);
	// none when the prompt has no full block or its hashes are unknown.
	// Place keeps the slice (the shells build a new one per turn).
	Anchors []Anchor
	// Continued: not the session's first turn (its conversation has turns
	// before). Such a turn of a session this pipeline has not routed is
	// inherited from another scheduler replica (routing.Request.Inherited).
	Continued bool
}

func (p *Pipeline) policyOf(t *Turn) routing.Policy {
	if t.Policy != "" {
		return t.Policy
	}
	return p.policy
}

// Admitted reports whether admission control decides this turn: session
// turns under session_aware when the pipeline runs admission.
func (p *Pipeline) Admitted(t *Turn) bool {
	return p.ctrl != nil && t.Key.SessionID != "" && p.policyOf(t).Admits()
}

// Admit decides whether a turn may run now. Turns that admission control
// does not decide always may. A caller woken from a Waiter passes it back.
func (p *Pipeline) Admit(now time.Time, t Turn, w *admission.Waiter) admission.Admission {
	if !p.Admitted(&t) {
		return admission.Admission{Verdict: admission.Run}
	}
	return p.ctrl.Admit(now, admission.Turn{RequestID: t.RequestID, Key: t.Key, ParentSessionID: t.ParentSessionID,
		PromptTokens: int64(t.PromptTokens), Final: t.Final}, w)
}

// Abandon takes a waiting turn out of admission's queue (its caller gave
// up; gone: the client left, not a deadline): admission.Controller.Abandon.
// A program it releases ends its session's routing state, as a final
// turn's placement does.
func (p *Pipeline) Abandon(now time.Time, w *admission.Waiter, gone bool) []admission.Event {
	if p.ctrl == nil || w == nil {
		return nil
	}
	evs := p.ctrl.Abandon(now, w, gone)
	for _, e := range evs {
		if e.Program.Lifecycle == admission.Terminated {
			p.forget(e.Program.Key)
		}
	}
	return evs
}

// Placement is where a turn goes and how the engine should treat it.
type Placement struct {
	routing.Decision
	// Priority is the engine scheduling priority (vLLM's convention: lower
	// runs earlier, 0 is normal) from admission's priority jump.
	Priority int32
	// Retain is how long the engine should keep what the turn caches ahead
	// of unretained blocks (admission's ResidentRetention; 0 none), in
	// whole seconds as the wire carries it (RouteResponse.retention_seconds).
	Retain time.Duration
	Events []admission.Event
}

// Place routes an admitted turn. cands are every live worker with its
// load and overlap, of which the turn's excluded workers are dropped first;
// when admission named the workers with room, the turn goes to one of those
// that is still a candidate (any candidate when none is). The program's
// placement is recorded (a program pinned to an excluded worker moves), and
// a final turn ends its session's routing state. A turn that cannot be
// placed, among them one whose every candidate is excluded
// (ErrEveryWorkerExcluded), hands its program its turn back.
func (p *Pipeline) Place(now time.Time, t Turn, adm admission.Admission, cands []routing.Candidate) (Placement, error) {
	admitted := p.Admitted(&t)
	session := SessionKey(t.Key)
	var evs []admission.Event
	if _, again := p.router.Load().RequestWorker(t.RequestID); again {
		// The same request placed again before the finish of its last
		// attempt came (that finish was lost): the attempt is over,
		// superseded by this one, or its program would stay in flight.
		p.router.Finish(now, t.RequestID, 0)
		if admitted {
			evs = p.ctrl.Supersede(now, t.Key)
		}
	}
	// The router pins only a candidate: an excluded pin (admission's worker,
	// the session's binding, the parent's worker) falls back to the cost.
	known := p.routed.has(session)
	kept := p.exclude(cands, t.Exclude)
	if len(kept) == 0 && len(cands) > 0 {
		evs = append(evs, p.Cancel(now, t)...)
		return Placement{Events: evs}, ErrEveryWorkerExcluded
	}
	d, err := p.router.Route(now, routing.Request{
		ID: t.RequestID, SessionID: session, ParentSessionID: SessionKey(admission.Key{Tenant: t.Key.Tenant, SessionID: t.ParentSessionID}),
		ISLTokens: t.PromptTokens, Blocks: t.Blocks, BlockSize: t.BlockSize, Policy: p.policyOf(&t),
		Inherited: t.Continued && session != "" && !known,
	}, p.restrict(kept, adm.Room), adm.Worker)
	if err != nil {
		evs = append(evs, p.Cancel(now, t)...)
		return Placement{Events: evs}, err
	}
	if session != "" && !t.Final {
		p.routed.add(session)
	}
	pl := Placement{Decision: d, Priority: EnginePriority(adm.PriorityJump), Retain: wholeSeconds(adm.Retain), Events: evs}
	if admitted && adm.Cold {
		p.ctrl.ColdPlaced(t.RequestID, d.Worker) // the router may not have taken admission's worker
	}
	if admitted {
		// A final turn too: its program holds the worker until it ends.
		pl.Events = append(pl.Events, p.ctrl.Placed(now, t.Key, d.Worker)...)
		if !t.Final {
			p.remember(t)
		}
	}
	if t.Final && session != "" {
		p.forget(t.Key)
	}
	return pl, nil
}

// wholeSeconds rounds a retention up to whole seconds.
func wholeSeconds(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

// ErrEveryWorkerExcluded: the turn already failed on every live worker. Not
// an outage to wait out, as routing.ErrNoWorkers is: the turn's last
// failure is its answer.
var ErrEveryWorkerExcluded = errors.New("the turn already failed on every live worker")

// exclude drops the workers a turn already failed on; none may be left.
func (p *Pipeline) exclude(cands []routing.Candidate, exclude []string) []routing.Candidate {
	if len(exclude) == 0 {
		return cands
	}
	out := p.kept[:0]
	for _, c := range cands {
		if !slices.Contains(exclude, c.Worker) {
			out = append(out, c)
		}
	}
	p.kept = out
	return out
}

// restrict keeps the candidates admission left room on; all of them when
// room is nil or names none of them.
func (p *Pipeline) restrict(cands []routing.Candidate, room []string) []routing.Candidate {
	if room == nil {
		return cands
	}
	clear(p.allowed)
	for _, id := range room {
		p.allowed[id] = true
	}
	out := p.cands[:0]
	for _, c := range cands {
		if p.allowed[c.Worker] {
			out = append(out, c)
		}
	}
	p.cands = out
	if len(out) == 0 {
		return cands
	}
	return out
}

// Cancel hands a program back the turn Admit let run when the turn will
// not reach an engine after all (the shell failed to gather its inputs).
func (p *Pipeline) Cancel(now time.Time, t Turn) []admission.Event {
	if !p.Admitted(&t) {
		return nil
	}
	p.ctrl.EndCold(t.RequestID)
	return p.ctrl.Cancel(now, t.Key)
}

// MarkPrefillDone drops a turn's prompt from its worker's prefill load (its
// first token arrived).
func (p *Pipeline) MarkPrefillDone(requestID string) bool { return p.router.MarkPrefillDone(requestID) }

// Ended is how a turn's response stream ended.
type Ended struct {
	PromptTokens, CompletionTokens int
	// Tools are the tools the turn called.
	Tools []string
	// Aborted: the stream was cut (the worker failed, the client left).
	Aborted bool
	// Superseded: another attempt of the same turn follows (the frontend
	// moves it to another worker).
	Superseded bool
}

// Finish records the end of a turn's response stream: the load it added is
// freed and its program moves to ACTING with the turn's real tokens. A turn
// cut before it produced anything (a worker that failed before the first
// token, whose turn the frontend migrates) is cancelled instead: no step of
// the session, no tool gap. Only a turn the router still tracked ends its
// program's turn (a repeated finish must not end the next one); known
// reports which, and key is the session it was routed for. That session's,
// not one the finish's caller names: a finish naming another session, or
// none, would end a turn still running, or leave the routed program
// REASONING for good.
func (p *Pipeline) Finish(now time.Time, requestID string, e Ended) (key admission.Key, known bool, evs []admission.Event) {
	_, session, known := p.router.Finish(now, requestID, e.CompletionTokens)
	if p.ctrl != nil {
		p.ctrl.EndCold(requestID) // a repeated finish finds no slot
	}
	key = SplitSessionKey(session)
	if !known || key.SessionID == "" || p.ctrl == nil {
		return key, known, nil
	}
	if e.Aborted && e.CompletionTokens == 0 {
		if e.Superseded {
			return key, known, p.ctrl.Supersede(now, key)
		}
		return key, known, p.ctrl.Cancel(now, key)
	}
	return key, known, p.ctrl.Finish(now, key, int64(e.PromptTokens), int64(e.CompletionTokens), e.Tools)
}

// EndSession ends a session that finished without a final turn: its
// program is released and its routing state forgotten.
func (p *Pipeline) EndSession(now time.Time, key admission.Key) []admission.Event {
	var evs []admission.Event
	if p.ctrl != nil {
		evs, _ = p.ctrl.Release(now, key)
	}
	p.forget(key)
	return evs
}

// forget ends a session's routing state: its binding, its prompt, and
// that it was routed (a later turn under its key starts afresh).
func (p *Pipeline) forget(key admission.Key) {
	session := SessionKey(key)
	p.routed.forget(session)
	delete(p.prompts, key)
	p.router.EndSession(session)
}

// Tick is the periodic control step: admission's tick, then the routing
// state nobody will free (idle bindings past their TTL, in-flight turns
// whose finish never came, whose programs move on as if it had).
func (p *Pipeline) Tick(now time.Time) Tick {
	var tk Tick
	if p.ctrl != nil {
		tk.Admission = p.ctrl.Tick(now)
	}
	tk.BindingsExpired, tk.Stale = p.router.Expire(now)
	p.routed.age(now)
	for _, f := range tk.Stale {
		if p.ctrl != nil {
			p.ctrl.EndCold(f.ID)
		}
		if f.SessionID != "" && p.ctrl != nil {
			tk.Admission.Events = append(tk.Admission.Events, p.ctrl.Finish(now, SplitSessionKey(f.SessionID), 0, 0, nil)...)
		}
	}
	return tk
}

// Tick is what one control step did.
type Tick struct {
	Admission       admission.TickReport
	BindingsExpired int
	Stale           []routing.Freed
}

// RemoveWorker forgets a worker that left the fleet.
func (p *Pipeline) RemoveWorker(now time.Time, id string) []admission.Event {
	p.router.RemoveWorker(id)
	delete(p.base, id) // or Share would bring it back
	p.baseGen++
	if p.ctrl == nil {
		return nil
	}
	return p.ctrl.RemoveWorker(now, id)
}

// SessionKey is the routing core's name of a tenant-scoped session ("" for
// none).
func SessionKey(k admission.Key) string {
	if k.SessionID == "" {
		return ""
	}
	// Always prefixed, so that no (tenant, session) pair names another's.
	return k.Tenant + "\x00" + k.SessionID
}

// SplitSessionKey inverts SessionKey.
func SplitSessionKey(s string) admission.Key {
	if tenant, session, ok := strings.Cut(s, "\x00"); ok {
		return admission.Key{Tenant: tenant, SessionID: session}
	}
	return admission.Key{SessionID: s}
}

// EnginePriority turns admission control's priority jump (seconds of queue
// position, higher runs earlier) into an engine scheduling priority in
// vLLM's convention (lower runs earlier, 0 is normal): one level per second,
// rounded, so the defaults map to -1 (resumed), +2 (soft-demoted) and +1
// (both). Engines order by priority before arrival, so any non-zero level
// moves a request past every waiting request of the normal level.
func EnginePriority(jump float64) int32 {
	const limit = 1 << 20 // far beyond any configured jump; keeps NaN and Inf out
	if !(jump > -limit && jump < limit) {
		if jump > 0 {
			return -limit
		}
		if jump < 0 {
			return limit
		}
		return 0
	}
	return int32(-math.Round(jump))
}
