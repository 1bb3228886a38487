package admission

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// checkShares: after SetShares every worker of totals has the share its
// inputs give afresh, the kept demand is the one summed afresh, and the
// stale list holds each flagged worker once.
func checkShares(t *testing.T, c *Controller, tag string, totals map[string]Capacity, peers map[string]Use, replicas int) {
	t.Helper()
	waiting, paused := c.sumDemand()
	if kw, kp := c.demand(); kw != waiting || kp != paused {
		t.Fatalf("%s: kept demand %+v %+v, summed afresh %+v %+v", tag, kw, kp, waiting, paused)
	}
	for w, total := range totals {
		fresh := sharing{total: total, others: peers[w], replicas: replicas, own: c.useOf(w, waiting, paused)}
		if want, got := c.shareOf(fresh), c.workers[w].cap; got != want {
			t.Fatalf("%s: %s has the capacity %+v, its inputs now give %+v", tag, w, got, want)
		}
	}
	if len(c.shares.stale) > len(c.workers) {
		t.Fatalf("%s: stale list %d > workers %d", tag, len(c.shares.stale), len(c.workers))
	}
	in := map[string]int{}
	for _, id := range c.shares.stale {
		in[id]++
	}
	for id, w := range c.workers {
		if w.shareStale != (in[id] == 1) || in[id] > 1 {
			t.Fatalf("%s: %s flag %v listed %d", tag, id, w.shareStale, in[id])
		}
	}
}

// Incremental shares under every operation the controller has: up to four
// operations between SetShares calls (turns with cold and final ones,
// finishes and cancels, the index's answers, ticks, moves, releases,
// replica counts changing without a version, capacities set again with
// none, time passing, workers leaving, coming back or known only to the
// caller's totals), in five configurations; after every operation the kept
// demand is the one summed afresh, after every SetShares each share is the
// one its inputs give afresh (checkShares).
func TestSharesUnderEveryOperation(t *testing.T) {
	n := 40
	if testing.Short() {
		n = 10
	}
	cfgs := []func(*Config){
		nil,
		func(c *Config) { *c = DefaultConfig() },
		func(c *Config) {
			*c = DefaultConfig()
			c.ColdLane = 2
			c.ActingDecayTau = 0
			c.MaxWait = 20 * time.Second
		},
		func(c *Config) { *c = DefaultConfig(); c.ResumeOversized = true; c.IdleTTL = 30 * time.Second },
		func(c *Config) {
			*c = DefaultConfig()
			c.ReadmitOnGrowth = true
			c.ShedBacklog = 0.5
			c.ReplicaResumeMargin = 0.1
			c.ResumeOrder = ResumeDensest
		},
	}
	for seed := range uint64(n) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			c := newCtl(t, cfgs[seed%uint64(len(cfgs))])
			workers := []string{"w0", "w1", "w2", "w3", "w4"}
			totals := map[string]Capacity{}
			for _, w := range workers[:4] {
				totals[w] = Capacity{Tokens: int64(5_000 + rng.IntN(40_000)), MaxPrograms: 2 + rng.IntN(8)}
				c.SetWorker(w, totals[w])
			}
			heard := []map[string]Use{{}, {"w0": {Tokens: 9_000, Users: 1, Cold: 1}},
				{"w1": {Tokens: 30_000, Users: 1, Waiting: Demand{Tokens: 4000, Since: t0}}, "w3": {Tokens: 2_000, Users: 2, Reasoning: 2, Paused: Demand{Tokens: 9000, Since: t0.Add(time.Hour)}}}}
			peers, replicas := heard[0], 3
			version := uint64(1)
			now := t0
			waiters := map[string]*Waiter{}
			inflight := map[string]int{}
			reqs := map[string]string{} // cold request id -> session
			reqN := 0
			for step := range 1500 {
				for range rng.IntN(5) {
					now = now.Add(time.Duration(rng.IntN(4_000)) * time.Millisecond)
					s := fmt.Sprintf("s%02d", rng.IntN(25))
					switch op := rng.IntN(20); {
					case op < 5:
						var w *Waiter
						if ww := waiters[s]; ww != nil {
							select {
							case <-ww.Ready():
								w = ww
							default:
								if rng.IntN(3) != 0 {
									continue
								}
								c.Abandon(now, ww, true)
								delete(waiters, s)
								continue
							}
							delete(waiters, s)
						}
						reqN++
						id := fmt.Sprint("r", reqN)
						a := c.Admit(now, Turn{RequestID: id, Key: key(s), PromptTokens: int64(500 + rng.IntN(12_000)), Final: rng.IntN(25) == 0}, w)
						switch a.Verdict {
						case Wait:
							waiters[s] = a.Waiter
						case Run:
							inflight[s]++
							reqs[id] = s
							if a.Worker == "" && !a.Cold {
								c.Placed(now, key(s), workers[rng.IntN(len(workers))])
							}
						}
					case op < 8:
						for id, ss := range reqs {
							if rng.IntN(3) == 0 {
								continue
							}
							delete(reqs, id)
							c.EndCold(id)
							inflight[ss]--
							if rng.IntN(4) == 0 {
								c.Cancel(now, key(ss))
							} else {
								c.Finish(now, key(ss), int64(500+rng.IntN(12_000)), int64(rng.IntN(800)), []string{"t"})
							}
							break
						}
					case op < 10:
						if p, ok := c.Get(key(s)); ok && p.Phase == Acting && p.Worker != "" {
							bs := 16
							blocks := int(p.TokenTotal) / bs
							c.Observe(Holding{Key: key(s), Worker: p.Worker, Since: p.PhaseSince, Blocks: blocks, BlockSize: bs,
								Tiers: []int{rng.IntN(blocks + 1), rng.IntN(blocks + 1)}, Gone: rng.IntN(6) == 0})
						}
					case op < 12:
						c.Tick(now)
					case op < 13:
						for id := range reqs {
							c.ColdPlaced(id, workers[rng.IntN(len(workers))])
							break
						}
					case op < 14:
						c.Placed(now, key(s), workers[rng.IntN(len(workers))])
					case op < 15:
						c.Release(now, key(s))
					case op < 16:
						c.UsesOf(workers)
					case op < 17:
						if rng.IntN(2) == 0 {
							replicas = 1 + rng.IntN(4) // no version change
						} else {
							peers = heard[rng.IntN(len(heard))]
							version++
						}
					case op < 18:
						// SetWorker with the capacity the caller already has: no version change.
						w := workers[rng.IntN(len(workers))]
						if tot, ok := totals[w]; ok {
							c.SetWorker(w, tot)
						}
					case op < 19:
						now = now.Add(time.Duration(rng.IntN(120)) * time.Second)
					default:
						w := workers[rng.IntN(len(workers))]
						totals[w] = Capacity{Tokens: int64(2_000 + rng.IntN(50_000)), MaxPrograms: 1 + rng.IntN(8)}
						if rng.IntN(6) == 0 {
							totals[w] = Capacity{Tokens: 0, MaxPrograms: rng.IntN(3)}
						} else if rng.IntN(6) == 0 {
							totals[w] = Capacity{Tokens: int64(2_000 + rng.IntN(50_000))}
						}
						switch rng.IntN(5) {
						case 4: // totals only: the controller has never heard of it (or has)
						case 0:
						case 1:
							c.SetWorker(w, totals[w])
						case 2:
							c.RemoveWorker(now, w)
							c.SetWorker(w, totals[w])
						default:
							c.RemoveWorker(now, w)
							delete(totals, w)
						}
						version++
					}
					w1, p1 := c.sumDemand()
					if kw, kp := c.demand(); kw != w1 || kp != p1 {
						t.Fatalf("seed %d step %d: kept demand %+v %+v, summed afresh %+v %+v", seed, step, kw, kp, w1, p1)
					}
				}
				v := version
				if rng.IntN(15) == 0 {
					v = 0
				}
				c.SetShares(totals, func(w string) Use { return peers[w] }, replicas, v)
				checkShares(t, c, fmt.Sprintf("seed %d step %d", seed, step), totals, peers, replicas)
			}
		})
	}
}
