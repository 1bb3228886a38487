package admission

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestPropertyRandomWorkload drives the controller with random turns,
// finishes, final turns, abandoned waits, capacity changes and ticks on a
// fake clock, and checks after every step that the incremental sums match
// the table and no program is lost, and after every tick that every worker
// that can get below its target does and no program waits past the cap.
func TestPropertyRandomWorkload(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runProperty(t, seed, nil) })
	}
}

// The same with Switchyard's defaults but idle programs counted whole
// (HeldFromIndex off, below): the cold lane, rotation and retention on, and
// a cold turn's slot tracked by the model: every worker holds exactly the
// cold turns the model has running there, never more than its lane.
func TestPropertyRandomWorkloadColdLane(t *testing.T) {
	d := DefaultConfig()
	d.HeldFromIndex = false
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runProperty(t, seed, &d) })
	}
}

// The same with Switchyard's defaults, idle programs counted by what the
// index says they hold: answers of every size, before and between the other
// steps, keep the sums equal to the table's.
func TestPropertyRandomWorkloadHeldFromIndex(t *testing.T) {
	d := DefaultConfig()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runProperty(t, seed, &d) })
	}
}

func runProperty(t *testing.T, seed uint64, cfg *Config) {
	rng := rand.New(rand.NewPCG(seed, 99))
	c := newCtl(t, func(c *Config) {
		if cfg != nil {
			*c = *cfg
		}
	})
	now := t0
	workers := []string{"w0", "w1", "w2", "w3"}
	setCap := func(w string) {
		cp := Capacity{Tokens: int64(5_000 + rng.IntN(45_000))}
		if rng.IntN(2) == 0 {
			cp.MaxPrograms = 4 + rng.IntN(12)
		}
		c.SetWorker(w, cp)
	}
	for _, w := range workers {
		setCap(w)
	}
	inflight := map[string]int{}      // session → admitted turns not finished
	running := map[string][]string{}  // session → their request ids, oldest first
	waiters := map[string]*Waiter{}   // session → blocked turn
	waitingID := map[string]string{}  // session → its blocked turn's id
	waitingFinal := map[string]bool{} // session → its blocked turn is marked final
	coldOn := map[string]string{}     // request id → worker, of the turns running cold
	next := 0
	end := func(s string) { // the oldest running turn of s ends
		id := running[s][0]
		running[s] = running[s][1:]
		c.EndCold(id)
		delete(coldOn, id)
	}
	admit := func(s string, w *Waiter, final bool) {
		id := waitingID[s]
		if w == nil {
			next++
			id = fmt.Sprintf("%s#%d", s, next)
		}
		a := c.Admit(now, Turn{RequestID: id, Key: key(s), PromptTokens: int64(200 + rng.IntN(6_000)), Final: final}, w)
		switch a.Verdict {
		case Wait:
			waiters[s], waitingID[s], waitingFinal[s] = a.Waiter, id, final
		case Run:
			delete(waiters, s)
			inflight[s]++
			running[s] = append(running[s], id)
			if a.Cold {
				coldOn[id] = a.Worker
			}
			if a.Worker == "" {
				choice := workers[rng.IntN(len(workers))]
				if len(a.Room) > 0 {
					choice = a.Room[rng.IntN(len(a.Room))]
				}
				c.Placed(now, key(s), choice)
			}
		}
	}
	var total TickReport
	defer func() {
		t.Logf("paused %d marked %d resumed %d forced %d expired %d demoted %d",
			total.Paused, total.Marked, total.Resumed, total.ForcedResumed, total.Expired, total.SoftDemoted)
	}()
	for step := range 3000 {
		now = now.Add(time.Duration(rng.IntN(20_000)) * time.Millisecond)
		s := fmt.Sprintf("s%02d", rng.IntN(60))
		if c.cfg.HeldFromIndex && rng.IntN(3) == 0 { // the index answers about an idle program
			if p, ok := c.Get(key(s)); ok && p.Lifecycle == Active && p.Phase == Acting {
				c.Observe(Holding{Key: p.Key, Worker: p.Worker, Since: p.PhaseSince, Blocks: 400, BlockSize: 16,
					Tiers: []int{rng.IntN(420)}})
				checkInvariants(t, c, now, step, inflight, waiters)
			}
		}
		switch op := rng.IntN(20); {
		case op < 7: // a turn starts
			if waiters[s] == nil {
				admit(s, nil, false)
			}
		case op < 13: // a turn ends
			if inflight[s] > 0 {
				inflight[s]--
				end(s)
				c.Finish(now, key(s), int64(200+rng.IntN(6_000)), int64(rng.IntN(800)), nil)
			}
		case op < 14: // the session's last turn starts: released when no turn of it runs
			if waiters[s] == nil {
				admit(s, nil, true)
			}
		case op < 15: // a client gives up waiting
			if w := waiters[s]; w != nil {
				c.Abandon(now, w, true)
				delete(waiters, s)
			}
		case op < 16:
			setCap(workers[rng.IntN(len(workers))])
		default:
			rep := c.Tick(now)
			checkAfterTick(t, c, now, step, rep)
			total.Paused += rep.Paused
			total.Marked += rep.Marked
			total.Resumed += rep.Resumed
			total.ForcedResumed += rep.ForcedResumed
			total.Expired += rep.Expired
			total.SoftDemoted += rep.SoftDemoted
		}
		// Woken turns come back.
		for s, w := range waiters {
			select {
			case <-w.Ready():
				admit(s, w, waitingFinal[s])
			default:
			}
		}
		checkInvariants(t, c, now, step, inflight, waiters)
		held, claimed := map[string]int{}, map[string]int{}
		for _, w := range coldOn {
			held[w]++
		}
		for _, w := range waiters {
			if w.claim != "" {
				claimed[w.claim]++
				claimed[""]++ // all of them
			}
		}
		for _, w := range workers {
			if ws := c.workers[w]; ws.cold != held[w] || ws.cold+ws.claimed > c.cfg.ColdLane {
				t.Fatalf("step %d: worker %s holds %d cold slots and %d for woken turns, the model runs %d there (lane %d)", step, w, ws.cold, ws.claimed, held[w], c.cfg.ColdLane)
			}
			if ws := c.workers[w]; ws.claimed != claimed[w] {
				t.Fatalf("step %d: worker %s holds %d slots for woken turns, %d woken turns hold one there", step, w, ws.claimed, claimed[w])
			}
		}
		if n := claimed[""]; c.claims != n {
			t.Fatalf("step %d: %d claims counted, %d woken turns hold a slot", step, c.claims, n)
		}
	}
}

func checkInvariants(t *testing.T, c *Controller, now time.Time, step int, inflight map[string]int, waiters map[string]*Waiter) {
	t.Helper()
	all := c.List(Filter{})
	type sums struct {
		reasoningTokens, actingTokens int64
		active, reasoning, marked     int
	}
	got := map[string]*sums{}
	var counts [4][3]int
	for _, p := range all {
		counts[p.Lifecycle][p.Phase]++
		if p.Lifecycle != Active || p.Worker == "" {
			continue
		}
		s := got[p.Worker]
		if s == nil {
			s = &sums{}
			got[p.Worker] = s
		}
		s.active++
		if p.Phase == Reasoning {
			s.reasoning++
			s.reasoningTokens += p.TokenTotal
			if p.MarkedForPause {
				s.marked++
			}
		} else {
			s.actingTokens += p.held()
		}
	}
	if len(c.paused) != counts[Paused][Reasoning]+counts[Paused][Acting] {
		t.Fatalf("step %d: %d in the paused set, table has %v", step, len(c.paused), counts[Paused])
	}
	if counts != c.counts {
		t.Fatalf("step %d: state counts %v, table %v", step, c.counts, counts)
	}
	for id, w := range c.workers {
		s := got[id]
		if s == nil {
			s = &sums{}
		}
		if w.active != s.active || w.reasoning != s.reasoning || w.marked != s.marked || w.reasoningTokens != s.reasoningTokens || w.actingTokens != s.actingTokens {
			t.Fatalf("step %d: worker %s sums %+v, table %+v", step, id, *w, *s)
		}
	}
	// No program lost: one with a turn in flight or waiting is alive.
	for s, n := range inflight {
		if n == 0 {
			continue
		}
		p, ok := c.Get(key(s))
		if !ok || p.Lifecycle == Terminated {
			t.Fatalf("step %d: program %s with %d turns in flight lost (%+v)", step, s, n, p)
		}
		if p.InFlight != n {
			t.Fatalf("step %d: %s in flight %d, model %d", step, s, p.InFlight, n)
		}
	}
	for s, w := range waiters {
		p, ok := c.Get(key(s))
		select {
		case <-w.Ready():
			continue
		default:
		}
		if !ok || p.Lifecycle != Paused {
			t.Fatalf("step %d: turn of %s waits on a program that is %+v", step, s, p)
		}
	}
}

func checkAfterTick(t *testing.T, c *Controller, now time.Time, step int, rep TickReport) {
	t.Helper()
	for _, p := range c.List(Filter{Lifecycle: Paused}) {
		if now.Sub(p.PausedAt) >= c.cfg.ResumeTimeout {
			t.Fatalf("step %d: %s paused %v, past the cap", step, p.Key.SessionID, now.Sub(p.PausedAt))
		}
	}
	resumed := map[string]bool{}
	for _, e := range rep.Events {
		if e.Reason == ReasonResumed || e.Reason == ReasonForcedResume {
			resumed[e.Program.ID] = true
		}
	}
	for id, w := range c.workers {
		if !c.over(w) {
			continue
		}
		// Still over: nothing more could be paused now. Every ACTING
		// program left was resumed this tick, and the REASONING ones are
		// marked as far as needed to reach the target.
		used, count := w.used(&c.cfg), w.reasoning
		unmarked := 0
		tokenOver := w.cap.Tokens > 0 && w.used(&c.cfg) > float64(w.cap.Tokens)*c.cfg.PauseThreshold
		for _, p := range c.List(Filter{Worker: id}) {
			if tokenOver && p.Phase == Acting && !resumed[p.ID] {
				t.Fatalf("step %d: worker %s over (util %.3f) with ACTING %s left", step, id, w.util(&c.cfg), p.Key.SessionID)
			}
			if p.Phase == Reasoning {
				if p.MarkedForPause {
					used -= float64(p.TokenTotal + c.cfg.BufferPerProgram)
					count--
				} else {
					unmarked++
				}
			}
		}
		tokensOK := w.cap.Tokens <= 0 || used <= float64(w.cap.Tokens)*c.cfg.PauseTarget+1e-6
		countOK := w.cap.MaxPrograms <= 0 || float64(count) <= float64(w.cap.MaxPrograms)*c.cfg.PauseTarget
		if !(tokensOK && countOK) && unmarked > 0 {
			t.Fatalf("step %d: worker %s projected %.0f/%d, count %d, with %d unmarked REASONING", step, id, used, w.cap.Tokens, count, unmarked)
		}
	}
}
