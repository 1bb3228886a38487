package admission

import (
	"math"
	"sort"
	"time"
)

// WorkerTick is what one tick did to one worker.
type WorkerTick struct {
	Worker        string
	Before, After float64 // utilization (the larger of tokens and count)
	Paused        int
	Marked        int
	Resumed       int
	SoftDemoted   bool
}

// TickReport is the outcome of one tick.
type TickReport struct {
	Time          time.Time
	Expired       int // idle programs released
	Pruned        int // TERMINATED programs dropped from the table
	SoftDemoted   int // workers in the soft-demote band
	Resumed       int // by BFD packing
	ForcedResumed int // past ResumeTimeout
	Paused        int
	Marked        int
	StillPaused   int
	Workers       []WorkerTick
	Events        []Event
}

// Changed reports whether the tick changed any program.
func (r *TickReport) Changed() bool {
	return r.Expired+r.Resumed+r.ForcedResumed+r.Paused+r.Marked > 0
}

// Tick runs one control step. The order matters (dynamo.md §4): expire idle
// programs, soft-demote, resume, then pause — so that a program paused in
// this tick cannot be resumed before the next one.
func (c *Controller) Tick(now time.Time) TickReport {
	rep := TickReport{Time: now}
	ids := c.workerIDs()
	per := make(map[string]*WorkerTick, len(ids))
	for _, id := range ids {
		w := c.workers[id]
		per[id] = &WorkerTick{Worker: id, Before: math.Max(w.util(&c.cfg), w.countUtil())}
	}
	c.resumedNow = map[string]bool{}
	c.expireIdle(now, &rep)
	c.softDemote(now, ids, per, &rep)
	c.forcedResume(now, ids, per, &rep)
	c.packResume(now, ids, per, &rep)
	c.reshare()
	c.pauseUntilSafe(now, ids, per, &rep)
	c.rotate(now, per, &rep)
	c.passColdSlots() // slots a worker that joined or grew brought
	c.commit()
	c.resumedNow = nil

	rep.StillPaused = c.counts[Paused][Reasoning] + c.counts[Paused][Acting]
	for _, id := range ids {
		w := c.workers[id]
		t := per[id]
		t.After = math.Max(w.util(&c.cfg), w.countUtil())
		rep.Workers = append(rep.Workers, *t)
	}
	return rep
}

func (c *Controller) workerIDs() []string { return append([]string(nil), c.ids...) }

// over reports a worker above the pause threshold, by tokens or by count.
func (c *Controller) over(w *workerState) bool {
	return (w.cap.Tokens > 0 && w.used(&c.cfg) > float64(w.cap.Tokens)*c.cfg.PauseThreshold) ||
		(w.cap.MaxPrograms > 0 && float64(w.reasoning) > float64(w.cap.MaxPrograms)*c.cfg.PauseThreshold)
}

// expireIdle releases ACTING programs idle for IdleTTL with nothing in
// flight or waiting, and drops TERMINATED rows past their retention. Both
// pop time-ordered queues: the cost is the number of programs that became
// due, not the size of the table.
func (c *Controller) expireIdle(now time.Time, rep *TickReport) {
	if c.cfg.IdleTTL > 0 {
		for _, e := range c.idle.popDue(now.Add(-c.cfg.IdleTTL)) {
			p := e.p
			if !p.LastActive.Equal(e.at) || p.Lifecycle == Terminated || c.get(p.ID) != p {
				continue // active since, or gone: a later entry (if any) decides
			}
			if p.Phase == Acting && p.InFlight == 0 && len(c.q.byProgram[p.ID]) == 0 {
				rep.Events = append(rep.Events, c.terminate(now, p, ReasonExpired)...)
				rep.Expired++
			}
		}
	}
	for _, e := range c.ended.popDue(now.Add(-c.cfg.TerminatedRetention)) {
		if p := e.p; p.Lifecycle == Terminated && p.PhaseSince.Equal(e.at) && c.get(p.ID) == p {
			c.drop(p)
			rep.Pruned++
		}
	}
}

// pausedPrograms returns the PAUSED programs in arrival order.
func (c *Controller) pausedPrograms() []*Program {
	out := make([]*Program, 0, len(c.paused))
	for _, p := range c.paused {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// softDemote marks workers in [soft threshold, pause threshold]: their
// programs' requests get a negative priority jump for 1.5 ticks, so the
// engine serves programs on healthier workers first as this one fills.
func (c *Controller) softDemote(now time.Time, ids []string, per map[string]*WorkerTick, rep *TickReport) {
	for _, id := range ids {
		w := c.workers[id]
		if w.cap.Tokens <= 0 && w.cap.MaxPrograms <= 0 {
			continue
		}
		u := math.Max(w.util(&c.cfg), w.countUtil())
		if u >= c.cfg.SoftDemoteThreshold && !c.over(w) {
			w.demotedUntil = now.Add(c.cfg.TickInterval * 3 / 2)
			per[id].SoftDemoted = true
			rep.SoftDemoted++
		}
	}
}

// forcedResume resumes the programs whose wait hit a bound, room or not:
// paused ResumeTimeout, or with a turn waiting MaxWait. A program past
// ResumeTimeout goes to the least utilized worker; one past MaxWait to its
// last worker (where its KV is) when that is still in the fleet. The pause
// step then sheds others around them.
func (c *Controller) forcedResume(now time.Time, ids []string, per map[string]*WorkerTick, rep *TickReport) {
	if len(ids) == 0 {
		return
	}
	for _, p := range c.pausedPrograms() {
		pausedFor := now.Sub(p.PausedAt)
		reason, target := ReasonForcedResume, ""
		switch {
		case pausedFor >= c.cfg.ResumeTimeout:
		case c.cfg.MaxWait > 0 && c.waitedSince(p, now) >= c.cfg.MaxWait:
			reason = ReasonWaitBound
			if _, ok := c.workers[p.LastWorker]; ok {
				target = p.LastWorker
			}
		default:
			continue
		}
		if target == "" {
			bestU := math.Inf(1)
			for _, id := range ids {
				w := c.workers[id]
				if u := math.Max(w.util(&c.cfg), w.countUtil()); u < bestU {
					target, bestU = id, u
				}
			}
		}
		c.update(p, func(p *Program) { c.resume(p, now, target) })
		c.wake(p.ID)
		c.resumedNow[p.ID] = true
		per[target].Resumed++
		rep.ForcedResumed++
		ev := c.event(now, p, reason)
		ev.PausedFor = pausedFor
		rep.Events = append(rep.Events, ev)
	}
}

// waitedSince is how long a program's longest-waiting turn has waited;
// zero with none waiting.
func (c *Controller) waitedSince(p *Program, now time.Time) time.Duration {
	var d time.Duration
	for _, w := range c.q.byProgram[p.ID] {
		d = max(d, now.Sub(w.since))
	}
	return d
}

// resumeRoom is a worker's headroom below the resume ceiling during packing.
type resumeRoom struct {
	id       string
	headroom float64
	slots    int // free REASONING slots; MaxInt when unknown
}

// packResume is ThunderAgent's best-fit-decreasing resume: take paused
// programs in order (returning turns, then new programs, then the rest;
// smallest first within a group) while their total fits the fleet's
// headroom below the resume ceiling, then place the largest first on the
// worker with the most headroom left.
func (c *Controller) packResume(now time.Time, ids []string, per map[string]*WorkerTick, rep *TickReport) {
	if len(c.paused) == 0 || len(ids) == 0 {
		return
	}
	paused := c.pausedPrograms()
	if len(paused) == 0 {
		return
	}
	buf := float64(c.cfg.BufferPerProgram)
	rooms := make([]resumeRoom, 0, len(ids))
	var total float64
	for _, id := range ids {
		w := c.workers[id]
		ceiling := c.resumeCeiling(w)
		r := resumeRoom{id: id, headroom: math.Inf(1), slots: math.MaxInt}
		if t := w.cap.resumeTokens(); t > 0 {
			r.headroom = float64(t)*ceiling - c.decayed(now, id)
		}
		if w.cap.MaxPrograms > 0 {
			r.slots = slotsBelow(w.cap.MaxPrograms, ceiling) - w.reasoning
		}
		if r.headroom <= buf {
			continue
		}
		rooms = append(rooms, r)
		total += r.headroom
	}
	if len(rooms) == 0 {
		return
	}
	group := func(p *Program) int {
		switch {
		case p.StepCount > 0 && len(c.q.byProgram[p.ID]) > 0:
			return 0
		case p.StepCount == 0:
			return 1
		}
		return 2
	}
	sort.Slice(paused, func(i, j int) bool {
		a, b := paused[i], paused[j]
		if ga, gb := group(a), group(b); ga != gb {
			return ga < gb
		}
		switch {
		case c.cfg.ResumeOrder == ResumeOldest:
			if !a.PausedAt.Equal(b.PausedAt) {
				return a.PausedAt.Before(b.PausedAt)
			}
		case c.cfg.ResumeOrder == ResumeDensest:
			if ca, cb := c.residentCost(a), c.residentCost(b); ca != cb {
				return ca < cb
			}
		case a.TokenTotal != b.TokenTotal:
			return a.TokenTotal < b.TokenTotal
		}
		return a.Seq < b.Seq
	})
	need := c.resumeNeed()
	var chosen []*Program
	var cum float64
	for _, p := range paused {
		need := need(p)
		if cum+need <= total {
			chosen = append(chosen, p)
			cum += need
		}
	}
	sort.SliceStable(chosen, func(i, j int) bool { return chosen[i].TokenTotal > chosen[j].TokenTotal })
	for _, p := range chosen {
		need := need(p)
		waiting := len(c.q.byProgram[p.ID]) > 0
		fits := func(r *resumeRoom) bool { return r.headroom >= need && (!waiting || r.slots > 0) }
		best := -1
		for i := range rooms {
			r := &rooms[i]
			if !fits(r) {
				continue
			}
			if c.cfg.ResumeOnLastWorker && r.id == p.LastWorker {
				best = i // where its prefix is likely still cached
				break
			}
			if best < 0 || r.headroom > rooms[best].headroom {
				best = i
			}
		}
		if best < 0 {
			continue
		}
		rooms[best].headroom -= need
		if waiting {
			rooms[best].slots--
		}
		target := rooms[best].id
		pausedFor := now.Sub(p.PausedAt)
		c.update(p, func(p *Program) { c.resume(p, now, target) })
		c.wake(p.ID)
		c.resumedNow[p.ID] = true
		per[target].Resumed++
		rep.Resumed++
		ev := c.event(now, p, ReasonResumed)
		ev.PausedFor = pausedFor
		rep.Events = append(rep.Events, ev)
	}
}

// slotsBelow is how many of max programs fit under the ceiling (a
// fraction). Ceilings are differences such as 0.85 − 0.05, which is
// 0.7999999999999999 in binary: a bare truncation would give 5 programs 3
// slots below 0.80 instead of 4, so the product is rounded down only past
// float noise.
func slotsBelow(max int, ceiling float64) int {
	return int(math.Floor(float64(max)*ceiling + 1e-9))
}

// resumeNeed returns the headroom a paused program takes when it resumes.
// A program larger than a worker's pause target can never fit under the
// resume ceiling, so ThunderAgent leaves it to the forced resume; with
// ResumeOversized it counts as a pause target's worth and resumes as soon
// as one worker is that empty (the pause step then sheds the smaller
// programs around it).
//
// The cap is also kept under the resume ceiling, buffer included: with a
// ceiling at the pause target (no hysteresis above it) a capped program
// would otherwise never fit and wait for the forced resume.
func (c *Controller) resumeNeed() func(p *Program) float64 {
	buf := float64(c.cfg.BufferPerProgram)
	oversized := math.Inf(1)
	if c.cfg.ResumeOversized {
		for _, id := range c.ids {
			if w := c.workers[id]; w.cap.whole() > 0 {
				oversized = min(oversized, float64(w.cap.whole())*min(c.cfg.PauseTarget, c.resumeCeiling(w))-buf)
			}
		}
	}
	return func(p *Program) float64 { return min(float64(p.TokenTotal), oversized) + buf }
}

// shedOrder sorts a worker's programs in the order the pause step sheds
// them (PauseOrder); REASONING programs, marked at their next boundary,
// follow the same order.
func (c *Controller) shedOrder(now time.Time, progs []*Program) []*Program {
	bySize := func(a, b *Program) bool {
		if a.TokenTotal != b.TokenTotal {
			return a.TokenTotal < b.TokenTotal
		}
		return a.Seq < b.Seq
	}
	if c.cfg.PauseOrder != PauseLatestReturn {
		sort.Slice(progs, func(i, j int) bool { return bySize(progs[i], progs[j]) })
		return progs
	}
	back := make(map[*Program]time.Duration, len(progs))
	for _, p := range progs {
		if p.Phase == Acting {
			back[p] = c.gaps.Remaining(p.ID, p.Tools, now.Sub(p.PhaseSince))
		}
	}
	sort.Slice(progs, func(i, j int) bool {
		a, b := progs[i], progs[j]
		if back[a] != back[b] {
			return back[a] > back[b]
		}
		return bySize(a, b)
	})
	return progs
}

// pauseUntilSafe sheds load from every worker over the threshold: ACTING
// programs in PauseOrder — ThunderAgent's smallest first (recompute cost
// grows with the square of the context, so the smallest are the cheapest
// to lose), or the one expected back last first — until the worker is at
// the target; if that is not enough, REASONING programs are marked to pause
// at their next tool boundary — a generation is never preempted.
func (c *Controller) pauseUntilSafe(now time.Time, ids []string, per map[string]*WorkerTick, rep *TickReport) {
	for _, id := range ids {
		w := c.workers[id]
		targetTokens := float64(w.cap.Tokens) * c.cfg.PauseTarget
		targetCount := float64(w.cap.MaxPrograms) * c.cfg.PauseTarget
		tokensOK := func(used float64) bool { return w.cap.Tokens <= 0 || used <= targetTokens }
		countOK := func(n int) bool { return w.cap.MaxPrograms <= 0 || float64(n) <= targetCount }

		if !c.over(w) {
			// Back at or under the target: marks are no longer needed.
			if w.marked > 0 && tokensOK(w.used(&c.cfg)) && countOK(w.reasoning) {
				for _, p := range c.onWorker(id) {
					if p.MarkedForPause {
						c.update(p, func(p *Program) { p.MarkedForPause = false })
					}
				}
			}
			continue
		}
		progs := c.shedOrder(now, c.onWorker(id))
		for _, p := range progs {
			if tokensOK(w.used(&c.cfg)) {
				break
			}
			// A program resumed in this tick keeps its place until the next
			// one: resume counts ACTING tokens decayed, pause counts them
			// whole, and without this rule the two would undo each other.
			if p.Phase != Acting || p.InFlight > 0 || c.resumedNow[p.ID] {
				continue
			}
			c.update(p, func(p *Program) { c.pause(p, now) })
			per[id].Paused++
			rep.Paused++
			rep.Events = append(rep.Events, c.event(now, p, ReasonPaused))
		}
		// Project the marks already placed, then mark more if needed.
		used, count := w.used(&c.cfg), w.reasoning
		for _, p := range progs {
			if p.MarkedForPause && p.Lifecycle == Active && p.Worker == id {
				used -= float64(p.TokenTotal) + float64(c.cfg.BufferPerProgram)
				count--
			}
		}
		for _, p := range progs {
			if tokensOK(used) && countOK(count) {
				break
			}
			if p.Lifecycle != Active || p.Worker != id || p.Phase != Reasoning || p.MarkedForPause {
				continue
			}
			c.update(p, func(p *Program) { p.MarkedForPause = true })
			used -= float64(p.TokenTotal) + float64(c.cfg.BufferPerProgram)
			count--
			per[id].Marked++
			rep.Marked++
			rep.Events = append(rep.Events, c.event(now, p, ReasonMarked))
		}
	}
}
