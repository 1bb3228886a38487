package admission

import (
	"math"
	"time"
)

// Several controllers (scheduler replicas, each owning a disjoint set of
// programs) deciding on one fleet: each sees only its own programs, yet the
// working sets they must keep within a worker's KV are all of them. Each
// decides with its share of every worker (SetShares), which has two sides.
//
// The pause side (Share's Tokens) is its own use scaled by the worker's
// capacity over everybody's use, so that every replica sees the worker
// exactly as full as it is. A worker over its threshold is then brought
// back by all of them together, each shedding its part of the excess,
// instead of each shedding the whole excess from its own programs (R
// controllers that each compared the fleet-wide total with the whole
// capacity would pause R times too much). (An equal split of what is free
// was tried first: on the tune half's overloaded level it cut the hit rate
// from 0.42 to 0.30, since a replica holding most of a worker saw it
// fuller than it was and paused early; setting a 1/replicas part of what
// is free aside for each replica that holds nothing there did the same on
// a smaller scale: 45 of a tune run's 115 pauses came at workers below the
// threshold.)
//
// The resume side (ResumeTokens) divides the room below the resume ceiling
// by what waits for it, as one controller's resume step would take it:
// paused programs with a turn waiting first, oldest first, then the rest
// of the paused programs, oldest first, and only what nobody asks for in
// proportion to use (a replica holding nothing on the worker gets an equal
// part, so that it can start). Each replica tells the others, with its
// use, how much room its paused programs ask for and when the oldest of
// them paused (Use.Waiting, Use.Paused). Dividing the room by use gave it
// to the replicas with the most resident rather than to those with
// programs waiting, and dividing it by what each asks for left no replica
// enough for a large program: on the tune half either way the replicas
// resumed the large programs only when they timed out.

// Use is what one controller's programs use on a worker, as admission
// counts it: the tokens it compares with the capacity (Utilization's Used),
// the REASONING programs it compares with MaxPrograms and the cold-lane
// turns running there; and the room its paused programs ask for.
type Use struct {
	Tokens    float64
	Reasoning int
	Cold      int
	// Users is how many replicas' uses this sums that use any tokens (1
	// or 0 for one replica's).
	Users int
	// Waiting is the room the controller's paused programs that have run
	// a turn and have one waiting ask for (the resume step's first group),
	// Paused what the rest of its paused programs ask for. Both are the
	// same on every worker: a program may resume on any (its last one when
	// it fits there, else the one with the most room).
	Waiting, Paused Demand
}

// Demand is room some paused programs ask for: each one's need when it
// resumes (its working set and a buffer), and when the oldest of them
// paused (zero for none).
type Demand struct {
	Tokens float64
	Since  time.Time
}

// Add sums two uses.
func (u Use) Add(v Use) Use {
	return Use{Tokens: u.Tokens + v.Tokens, Reasoning: u.Reasoning + v.Reasoning, Cold: u.Cold + v.Cold, Users: u.Users + v.Users,
		Waiting: u.Waiting.add(v.Waiting), Paused: u.Paused.add(v.Paused)}
}

// add sums two demands; the oldest of both is the older one.
func (d Demand) add(e Demand) Demand {
	since := d.Since
	if since.IsZero() || (!e.Since.IsZero() && e.Since.Before(since)) {
		since = e.Since
	}
	return Demand{Tokens: d.Tokens + e.Tokens, Since: since}
}

// claim is the part of room that own takes, others asking too: all of it
// up to own's tokens when own's oldest program paused first, else what is
// left after all of the others' (own does not know how much of theirs is
// younger than its own). The room is not divided in proportion to what
// each asks for: a large program would then fit in no replica's part.
func claim(room float64, own, others Demand) float64 {
	ahead := others.Tokens
	if others.Tokens <= 0 || own.Since.Before(others.Since) {
		ahead = 0
	}
	return min(own.Tokens, max(room-ahead, 0))
}

// UsesOf is what this controller's programs use on each of workers (no
// tokens on one it does not know), what it tells the other replicas: the paused
// programs' demand, the same on every worker, is summed once for all.
func (c *Controller) UsesOf(workers []string) []Use {
	waiting, paused := c.demand()
	out := make([]Use, len(workers))
	for i, id := range workers {
		out[i] = c.useOf(id, waiting, paused)
	}
	return out
}

// useOf is a worker's Use with the controller's demand (which a worker it
// does not know has too).
func (c *Controller) useOf(worker string, waiting, paused Demand) Use {
	w := c.workers[worker]
	if w == nil {
		return Use{Waiting: waiting, Paused: paused}
	}
	u := Use{Tokens: w.used(&c.cfg), Reasoning: w.reasoning, Cold: w.cold, Waiting: waiting, Paused: paused}
	if u.Tokens > 0 {
		u.Users = 1
	}
	return u
}

// shareMemo is what a controller keeps between SetShares calls so that a
// turn costs a pass over what changed, not over every worker and paused
// program (with 1,024 workers a whole pass cost 130–160 µs, at every
// turn, under the scheduler's lock). The generations count the changes to
// what the paused programs' demand is computed from; shareChanged lists
// the workers whose own use changed. A pass is whole when the caller's
// version (its totals and the others' uses), the replicas, the workers'
// capacities or the demand itself changed since the last one (a paused
// program that comes or goes changes every worker's share only when it
// changes the sums).
type shareMemo struct {
	// demandGen counts the changes to the paused programs (account),
	// capGen those to what resumeNeed reads: the workers, their whole
	// capacities and whether they are shared.
	demandGen, capGen uint64
	// demandAt is the key the cached waiting and paused were computed at
	// (demandOK: they were).
	demandAt        demandKey
	demandOK        bool
	waiting, paused Demand
	// stale lists the workers whose own use changed since the last pass
	// (workerState.shareStale).
	stale []string
	// passOK: a pass was made, with version, replicas, the workers'
	// capacities at passCaps (capGen) and the demand passWaiting and
	// passPaused.
	passOK                  bool
	version                 uint64
	replicas                int
	passCaps                uint64
	passWaiting, passPaused Demand
}

// demandKey is the state of demand's inputs.
type demandKey struct{ paused, queued, caps uint64 }

func (c *Controller) demandKey() demandKey {
	return demandKey{c.shares.demandGen, c.q.gen, c.shares.capGen}
}

// shareChanged notes that a worker's own use (Use.Tokens, Reasoning, Cold)
// changed: the next SetShares computes its share again.
func (c *Controller) shareChanged(id string, w *workerState) {
	// Before a first pass, or with one replica (no pass at all), the next
	// pass is whole anyway.
	if c.shares.passOK && !w.shareStale {
		w.shareStale = true
		c.shares.stale = append(c.shares.stale, id)
	}
}

// demand is Use.Waiting and Use.Paused, kept from the last call while
// nothing it is computed from changed (shareMemo).
func (c *Controller) demand() (waiting, paused Demand) {
	m := &c.shares
	if k := c.demandKey(); !m.demandOK || m.demandAt != k {
		m.waiting, m.paused = c.sumDemand()
		m.demandAt, m.demandOK = k, true
	}
	return m.waiting, m.paused
}

// sumDemand is Use.Waiting and Use.Paused, a pass over the paused
// programs. They are summed in arrival order, so that the sums are the same
// on every run.
func (c *Controller) sumDemand() (waiting, paused Demand) {
	need := c.resumeNeed()
	for _, p := range c.pausedPrograms() {
		d := Demand{Tokens: need(p), Since: p.PausedAt}
		if p.StepCount > 0 && len(c.q.byProgram[p.ID]) > 0 {
			waiting = waiting.add(d)
		} else {
			paused = paused.add(d)
		}
	}
	return waiting, paused
}

// sharing is what a worker's share was last computed from (SetShares,
// reshare): the share is a function of these alone, so a worker whose
// inputs are unchanged keeps it (at every turn, a replica's own use
// changes on one worker at most, and the others' only when a peer's is heard).
type sharing struct {
	total    Capacity
	others   Use
	replicas int
	own      Use
}

// SetShares makes the controller decide on every worker of totals (its
// whole capacity) with its share of it among replicas controllers, others
// being what the others' programs use there, as last heard (shareOf).
// SetWorker makes a worker whole again.
//
// version says what totals and others are: while the caller passes the same
// non-zero version, both are what they were at the last call, and only the
// workers whose own use changed since are computed again (the shares come
// out as a whole pass would make them); 0 means unknown, a whole pass.
//
// A pass that shares a worker anew (or among another number of replicas)
// changes its resume ceiling, which the paused programs' demand reads when
// an oversized one is resumed (resumeNeed): the pass is then made again,
// whole, with the demand that follows, so that every share holds for the
// state SetShares leaves.
func (c *Controller) SetShares(totals map[string]Capacity, others func(worker string) Use, replicas int, version uint64) {
	m := &c.shares
	for range 3 { // the second pass changes no ceiling
		at := c.demandKey()
		waiting, paused := c.demand()
		set := func(id string, total Capacity) Use {
			o := others(id)
			c.share(id, sharing{total: total, others: o, replicas: replicas, own: c.useOf(id, waiting, paused)})
			return o
		}
		if version == 0 || !m.passOK || m.version != version || m.replicas != replicas || m.passCaps != at.caps ||
			waiting != m.passWaiting || paused != m.passPaused {
			// The others' paused demand, for shedding: the most any worker
			// heard (a peer that does not know a worker yet sent none for
			// it). Kept while the caller's version holds, as the uses are.
			peers := 0.0
			for id, total := range totals {
				o := set(id, total)
				peers = max(peers, o.Waiting.Tokens+o.Paused.Tokens)
			}
			c.peersPaused = peers
		} else {
			for _, id := range m.stale {
				if total, ok := totals[id]; ok {
					set(id, total)
				}
			}
		}
		for _, id := range m.stale {
			if w := c.workers[id]; w != nil {
				w.shareStale = false
			}
		}
		m.stale = m.stale[:0]
		m.passOK, m.version, m.replicas, m.passCaps = true, version, replicas, at.caps
		m.passWaiting, m.passPaused = waiting, paused
		if c.demandKey() == at {
			return
		}
	}
}

// Unshare forgets the other replicas' demand: the controller decides alone
// again (Pipeline.Share with one replica, which gives every worker back
// whole); a departed peer's paused programs must not keep shedding.
func (c *Controller) Unshare() { c.peersPaused = 0 }

// reshare computes every shared worker's share again from its own use now
// and the others' as heard: the tick's pause step must see the worker as
// full as the resume step just made it (with the share from before, what
// was resumed read as over the share, and others were shed for it).
func (c *Controller) reshare() {
	waiting, paused := c.demand()
	for _, id := range c.ids {
		if sh := c.workers[id].sharing; sh != nil {
			in := *sh
			in.own = c.useOf(id, waiting, paused)
			c.share(id, in)
		}
	}
	// Every shared worker's share is now the demand's (SetShares compares
	// the next demand with this one).
	c.shares.passWaiting, c.shares.passPaused = waiting, paused
}

// share sets a worker's share from in, unless it was computed from the
// same inputs last.
func (c *Controller) share(id string, in sharing) {
	w := c.worker(id)
	if w.sharing != nil && *w.sharing == in {
		return
	}
	c.setCapacity(id, c.shareOf(in))
	if w.sharing == nil || w.sharing.replicas != in.replicas {
		c.shares.capGen++ // its resume ceiling (resumeNeed)
	}
	if w.sharing == nil {
		w.sharing = new(sharing)
	}
	*w.sharing = in
}

// resumeCeiling is where resume packs a worker up to: ResumeCeiling, less
// ReplicaResumeMargin on a worker shared among replicas.
func (c *Controller) resumeCeiling(w *workerState) float64 {
	if w.sharing == nil {
		return c.cfg.ResumeCeiling()
	}
	return c.resumeCeilingAmong(w.sharing.replicas)
}

// resumeCeilingAmong is resumeCeiling for a worker shared among replicas.
func (c *Controller) resumeCeilingAmong(replicas int) float64 {
	if replicas > 1 {
		return c.cfg.ResumeCeiling() - c.cfg.ReplicaResumeMargin
	}
	return c.cfg.ResumeCeiling()
}

// shareOf is Share for this controller from sh (its own use of the worker
// in sh.own), resume side and cold lane included: the lane's slots (ColdLane per
// worker, for the whole fleet) are taken first come, so the controller may
// fill those the others do not hold. (Slots are not divided like tokens:
// nothing is shed from a lane, and dividing one slot among replicas leaves
// none.)
func (c *Controller) shareOf(sh sharing) Capacity {
	total, own, others, replicas := sh.total, sh.own, sh.others, sh.replicas
	out := Share(total, own, others, replicas)
	if replicas > 1 && total.Tokens > 0 {
		out.ResumeTokens = resumeShare(total.Tokens, own, others, freePart(own, others, replicas), c.resumeCeilingAmong(replicas))
	}
	if replicas > 1 && c.cfg.ColdLane > 0 {
		if out.ColdSlots = c.cfg.ColdLane - others.Cold; out.ColdSlots <= 0 {
			out.ColdSlots = -1
		}
	}
	return out
}

// Share is the capacity a controller decides with on a worker of capacity
// total among replicas controllers, but for its resume side (shareOf): its
// own use plus its part of what is left after its own and the others' (as
// last heard), its part being its fraction of the use (1/replicas while
// it uses nothing there). Programs are counted whole: a worker's REASONING
// slots split as freePart divides tokens. An unknown dimension (0) stays
// unknown; a known one never drops to 0, which would read as unknown, but
// to 1.
func Share(total Capacity, own, others Use, replicas int) Capacity {
	if replicas <= 1 {
		return total
	}
	out := total
	idle := idleReplicas(own, others, replicas)
	if total.Tokens > 0 {
		free := float64(total.Tokens) - own.Tokens - others.Tokens
		out.Tokens = max(1, int64(own.Tokens+free*usePart(own, others, replicas)))
		out.WholeTokens = total.Tokens
	}
	if total.MaxPrograms > 0 {
		free := total.MaxPrograms - own.Reasoning - others.Reasoning
		if own.Reasoning > 0 {
			free = floorDiv(free*own.Reasoning*(replicas-idle), (own.Reasoning+others.Reasoning)*replicas)
		} else {
			free = floorDiv(free, replicas)
		}
		out.MaxPrograms = max(1, own.Reasoning+free)
	}
	return out
}

// idleReplicas is how many of replicas use no tokens on the worker.
func idleReplicas(own, others Use, replicas int) int {
	idle := replicas - min(others.Users, replicas-1)
	if own.Tokens > 0 {
		idle--
	}
	return idle
}

// usePart is a controller's part of what is free on a worker on the pause
// side: its fraction of the use, 1/replicas while it uses nothing there.
// Its share is then the capacity scaled by its fraction of the use, and it
// sees the worker exactly as full as it is.
func usePart(own, others Use, replicas int) float64 {
	if own.Tokens <= 0 {
		return 1 / float64(replicas)
	}
	return own.Tokens / (own.Tokens + others.Tokens)
}

// freePart is a controller's part of the room on a worker that no paused
// program asks for: the replicas that use nothing there get 1/replicas
// each, so that they can start; those that do, the rest in proportion to
// their use.
func freePart(own, others Use, replicas int) float64 {
	if own.Tokens <= 0 {
		return 1 / float64(replicas)
	}
	idle := idleReplicas(own, others, replicas)
	return (1 - float64(idle)/float64(replicas)) * own.Tokens / (own.Tokens + others.Tokens)
}

// resumeShare is ResumeTokens: the room below the resume ceiling
// (ceiling·total less everybody's use) goes first to the programs waiting,
// then to the rest of the paused ones (claim), and what nobody asks for in
// the proportion part; the share is the capacity that leaves the
// controller's use that much room below the ceiling. With no room it is
// 0, and Tokens holds: a replica that
// uses the worker resumes nothing there, and new programs are let in up
// to the whole capacity as one controller lets them in. (Giving every
// replica no room there, the idle ones included, cost 2 % of turns/min
// on the tune half.)
func resumeShare(total int64, own, others Use, part, ceiling float64) int64 {
	room := float64(total)*ceiling - own.Tokens - others.Tokens
	if room <= 0 {
		return 0
	}
	h := claim(room, own.Waiting, others.Waiting)
	room = max(room-own.Waiting.Tokens-others.Waiting.Tokens, 0)
	h += claim(room, own.Paused, others.Paused)
	room = max(room-own.Paused.Tokens-others.Paused.Tokens, 0)
	h += room * part
	return max(1, int64(math.Ceil((own.Tokens+h)/ceiling)))
}

// floorDiv is a/b rounded down (toward −∞ for a negative a).
func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
