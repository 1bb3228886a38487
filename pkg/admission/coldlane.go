package admission

import (
	"sort"
	"time"
)

// The cold lane. Pausing keeps the ACTIVE programs' working sets within
// the workers' counted KV, but on its own it also idles the GPUs: every ACTIVE program may be
// away in a tool while paused programs' turns wait. With ColdLane slots a
// paused program's turn runs anyway, cold: its program stays PAUSED (its
// working set counts on no worker), the turn goes after every ACTIVE
// program's in the engine's queue, and nothing it caches is retained, so
// the engine evicts it before the ACTIVE programs' idle blocks (which their
// turns ask to be retained: ResidentRetention). The slots bound how many
// cold turns run at once (not their tokens); a slot belongs to its turn
// (EndCold by request id), and a freed one goes to the turn that has
// waited longest.

// coldPriorityJump is a cold turn's priority jump: one second of queue
// position behind, engine priority +1 (turns.EnginePriority), behind every
// ACTIVE program's turn of the normal level.
const coldPriorityJump = -1.0

// coldSlot is where a turn of the paused program p, waiting since since,
// may run cold now, or "". A turn woken for a freed slot (w.claim) takes
// the one held for it; any other only while a slot is free beyond those
// held for woken turns and no turn has waited longer.
func (c *Controller) coldSlot(p *Program, since time.Time, w *Waiter) string {
	if c.cfg.ColdLane <= 0 {
		return ""
	}
	if w != nil && w.claim != "" {
		held, on := w.claim, w.claimOn
		c.dropClaim(w) // the held slot is taken now
		if ws := c.workers[held]; ws == on && c.freeSlots(ws) > 0 {
			return held
		}
		// Its worker left, or lost the slot meanwhile (a smaller share of
		// the lane, a migrated cold turn moved onto it): a free one, not one
		// held for another woken turn (which would make the outcome depend
		// again on which comes back first), or the turn waits on.
		return c.coldWorker(p)
	}
	if o := c.q.oldest(); c.openColdSlots() <= c.claims || (o != nil && o.since.Before(since)) {
		return ""
	}
	return c.coldWorker(p)
}

// openColdSlots counts the fleet's cold-lane slots no turn runs in, held
// for woken turns or not: while it is no more than the slots held (claims),
// a turn that was not woken for one runs none, wherever the held ones are.
func (c *Controller) openColdSlots() int {
	open := 0
	for _, w := range c.workers {
		open += c.openSlots(w)
	}
	return open
}

// openSlots is w's cold-lane slots no turn runs in; freeSlots those of
// them not held for a woken turn either.
func (c *Controller) openSlots(w *workerState) int { return max(c.lane(w)-w.cold, 0) }
func (c *Controller) freeSlots(w *workerState) int { return max(c.lane(w)-w.cold-w.claimed, 0) }

// lane is how many cold turns the controller may run on w at once.
func (c *Controller) lane(w *workerState) int {
	if w.cap.ColdSlots == 0 {
		return c.cfg.ColdLane
	}
	return max(w.cap.ColdSlots, 0)
}

// coldWorker is where p's cold turn goes: its last worker when that has a
// free slot (what its earlier turns cached may still be there), else the
// worker with the most; "" when none has one. p may be nil (a program
// gone): any worker.
func (c *Controller) coldWorker(p *Program) string {
	if p != nil {
		if w := c.workers[p.LastWorker]; w != nil && c.freeSlots(w) > 0 {
			return p.LastWorker
		}
	}
	best, most := "", 0
	for _, id := range c.ids {
		if n := c.freeSlots(c.workers[id]); n > most {
			best, most = id, n
		}
	}
	return best
}

// runCold admits the turn id of the PAUSED program p in worker's cold lane.
// The slot is the turn's, not the program's: EndCold(id) frees it, however
// the program fares meanwhile (resumed, released, replaced under its key).
func (c *Controller) runCold(now time.Time, p *Program, worker, id string) Admission {
	c.workers[worker].cold++
	c.shareChanged(worker, c.workers[worker])
	c.coldTurns[id] = worker
	c.update(p, func(p *Program) {
		p.InFlight++
		p.Phase, p.PhaseSince = Reasoning, now
		p.LastActive, p.LastWorker = now, worker
	})
	return Admission{Verdict: Run, Worker: worker, Cold: true, PriorityJump: coldPriorityJump,
		Events: []Event{c.event(now, p, ReasonCold)}}
}

// EndCold frees the cold-lane slot of turn id, if it ran cold, and hands
// it to the turn that has waited longest. The pipeline calls it when a
// turn finishes or is cancelled (before Finish or Cancel).
func (c *Controller) EndCold(id string) {
	w, ok := c.coldTurns[id]
	if !ok {
		return
	}
	delete(c.coldTurns, id)
	if ws := c.workers[w]; ws != nil && ws.cold > 0 {
		ws.cold--
		c.shareChanged(w, ws)
		c.passColdSlots()
	}
}

// ColdPlaced moves turn id's slot to the worker the router placed it on,
// when that is not the one admission chose (the chosen one was excluded:
// the turn migrates off a worker that failed).
func (c *Controller) ColdPlaced(id, worker string) {
	w, ok := c.coldTurns[id]
	if !ok || w == worker {
		return
	}
	if ws := c.workers[w]; ws != nil && ws.cold > 0 {
		ws.cold--
		c.shareChanged(w, ws)
	}
	c.worker(worker).cold++
	c.shareChanged(worker, c.workers[worker])
	c.coldTurns[id] = worker
	c.passColdSlots()
}

// passColdSlots wakes the turns that have waited longest, one for each
// slot open beyond those already held for woken turns, and holds for each
// the slot it will take (coldWorker, as if it ran now). Decided here, in
// the order they waited, a woken turn's worker does not depend on which of
// several woken at once asks again first (live, they race for the lock).
func (c *Controller) passColdSlots() {
	for c.openColdSlots() > c.claims {
		o := c.q.oldest()
		if o == nil {
			return
		}
		// Some worker has a free slot: more are open than are held.
		worker := c.coldWorker(c.get(o.programID))
		if worker == "" {
			return
		}
		c.q.remove(o)
		o.claim, o.claimOn = worker, c.workers[worker]
		o.claimOn.claimed++
		c.claims++
		c.woke(o)
	}
}

// dropClaim lets go of the slot held for a woken turn, without passing it
// on; it returns the slot's worker ("" when none was held).
func (c *Controller) dropClaim(w *Waiter) string {
	held := w.claim
	if held == "" {
		return ""
	}
	w.claimOn.claimed-- // on a worker that left, a state nobody reads
	w.claim, w.claimOn = "", nil
	c.claims--
	return held
}

// unclaim gives up the slot held for a woken turn that will not come back
// for it, passing it on. It reports whether the turn held one.
func (c *Controller) unclaim(w *Waiter) bool {
	if c.dropClaim(w) == "" {
		return false
	}
	c.passColdSlots()
	return true
}

// retention is what an admitted, not final, turn of p asks the engine to
// retain.
func (c *Controller) retention(p *Program) time.Duration {
	if p == nil || p.Lifecycle != Active {
		return 0
	}
	return c.cfg.ResidentRetention
}

// rotate pauses, while turns wait, the ACTING programs away longer than
// RotateAfter: a long tool call gives its place to a waiting program, which
// the next tick's resume step can take (the order of Tick: nothing paused
// here resumes in the same tick). A program's time away counts from its
// last resume when that is later: one resumed for room, with no turn
// waiting, gets RotateAfter to come back.
func (c *Controller) rotate(now time.Time, per map[string]*WorkerTick, rep *TickReport) {
	if c.cfg.RotateAfter <= 0 || len(c.q.byProgram) == 0 {
		return
	}
	type away struct {
		p     *Program
		since time.Time
	}
	var due []away
	for _, p := range c.withLifecycle(Active) {
		since := p.PhaseSince
		if p.ResumedAt.After(since) {
			since = p.ResumedAt
		}
		if p.Phase == Acting && p.InFlight == 0 && now.Sub(since) > c.cfg.RotateAfter {
			due = append(due, away{p, since})
		}
	}
	// As many as there are programs waiting, the longest away first: each
	// gives its place to one of them.
	sort.Slice(due, func(i, j int) bool {
		if !due[i].since.Equal(due[j].since) {
			return due[i].since.Before(due[j].since)
		}
		return due[i].p.Seq < due[j].p.Seq
	})
	for _, d := range due[:min(len(due), len(c.q.byProgram))] {
		p := d.p
		if t := per[p.Worker]; t != nil {
			t.Paused++
		}
		c.update(p, func(p *Program) { c.pause(p, now) })
		rep.Events = append(rep.Events, c.event(now, p, ReasonRotated))
		rep.Paused++
	}
}

// turnTime is what residentCost adds to a program's tool gap for the turn
// itself: a cached agent turn's prefill and answer take seconds.
const turnTime = 5 * time.Second

// residentCost is the KV-seconds a turn of p costs while it is resident:
// its working set times its typical cycle (ResumeDensest).
func (c *Controller) residentCost(p *Program) float64 {
	return float64(p.TokenTotal) * (c.gaps.Typical(p.ID, p.Tools) + turnTime).Seconds()
}
