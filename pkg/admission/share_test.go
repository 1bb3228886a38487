package admission

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestShareIsTheWholeForOneReplica(t *testing.T) {
	c := Capacity{Tokens: 1000, MaxPrograms: 8}
	if got := Share(c, Use{Tokens: 300, Reasoning: 2}, Use{}, 1); got != c {
		t.Fatalf("Share with one replica = %+v, want %+v", got, c)
	}
}

// The shares of R replicas that all use the worker sum to the capacity, up
// to rounding and to the floor of 1 a known dimension keeps (at most one
// unit per replica), over it or under; each is its own use plus its
// fraction of the use of the rest.
func TestSharesSumToTheCapacity(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		replicas := 2 + r.IntN(4)
		c := Capacity{Tokens: 1_000 + r.Int64N(1_000_000), MaxPrograms: 1 + r.IntN(64)}
		uses := make([]Use, replicas)
		var all Use
		for i := range uses {
			uses[i] = Use{Tokens: 1 + r.Float64()*float64(c.Tokens)/float64(replicas)*1.5, Reasoning: 1 + r.IntN(c.MaxPrograms/replicas+2), Users: 1}
			all = all.Add(uses[i])
		}
		var tokens int64
		var progs int
		for i, u := range uses {
			others := Use{Tokens: all.Tokens - u.Tokens, Reasoning: all.Reasoning - u.Reasoning, Users: all.Users - u.Users}
			s := Share(c, u, others, replicas)
			if s.Tokens < 1 || s.MaxPrograms < 1 {
				t.Fatalf("replica %d's share %+v: a known capacity read as unknown", i, s)
			}
			part := 1 / float64(replicas)
			if u.Tokens > 0 {
				part = u.Tokens / all.Tokens
			}
			if want := u.Tokens + (float64(c.Tokens)-all.Tokens)*part; want >= 1 && (float64(s.Tokens) < want-1 || float64(s.Tokens) > want) {
				t.Fatalf("replica %d's share %d tokens, want %.1f", i, s.Tokens, want)
			}
			tokens += s.Tokens
			progs += s.MaxPrograms
		}
		if all.Tokens <= float64(c.Tokens) && (tokens < c.Tokens-int64(replicas) || tokens > c.Tokens) {
			t.Fatalf("%d replicas, capacity %d, uses %+v: shares sum to %d tokens", replicas, c.Tokens, uses, tokens)
		}
		if all.Reasoning <= c.MaxPrograms && (progs < c.MaxPrograms-replicas || progs > c.MaxPrograms+replicas) {
			t.Fatalf("%d replicas, %d programs at most, uses %+v: shares sum to %d", replicas, c.MaxPrograms, uses, progs)
		}
	}
}

func TestShareKeepsUnknownUnknown(t *testing.T) {
	if got := Share(Capacity{}, Use{Tokens: 5}, Use{Tokens: 7}, 3); got != (Capacity{}) {
		t.Fatalf("Share of an unknown capacity = %+v", got)
	}
}

// A worker over its capacity: each replica sees it as full as it is (its
// use over its share is the worker's use over its capacity), so that each
// sheds its fraction of the excess and together they shed it once.
func TestShareSplitsAnExcess(t *testing.T) {
	c := Capacity{Tokens: 900}
	a, b, d := Use{Tokens: 600, Users: 1}, Use{Tokens: 300, Users: 1}, Use{Tokens: 300, Users: 1} // 1200 in all: 300 over
	sa := Share(c, a, b.Add(d), 3)
	sb := Share(c, b, a.Add(d), 3)
	if sa.Tokens != 450 || sb.Tokens != 225 {
		t.Fatalf("shares %+v and %+v, want 450 and 225 of 900 (each at 4/3 of its share, as the worker)", sa, sb)
	}
}

// A replica with nothing on a worker gets an equal part of what is free
// there: it can start a program, where a share of its (zero) use would be
// none. The one replica that uses the worker sees it as full as it is on
// the pause side; on the resume side the three divide the room below the
// ceiling, nobody waiting, in equal parts here.
func TestShareOfANewcomer(t *testing.T) {
	c := Capacity{Tokens: 900, MaxPrograms: 9}
	user := Use{Tokens: 300, Reasoning: 3, Users: 1}
	idle := Share(c, Use{}, user, 3)
	if idle.Tokens != 200 || idle.MaxPrograms != 2 {
		t.Fatalf("a newcomer's share %+v, want 200 tokens and 2 programs", idle)
	}
	u := Share(c, user, Use{}, 3)
	if u.Tokens != 900 || u.MaxPrograms+2*idle.MaxPrograms != 9 {
		t.Fatalf("the user's share %+v, want 900 tokens and the slots the two idle ones' %+v leave of %+v", u, idle, c)
	}
	const ceiling = 0.8
	ru := resumeShare(c.Tokens, user, Use{}, freePart(user, Use{}, 3), ceiling)
	ri := resumeShare(c.Tokens, Use{}, user, freePart(Use{}, user, 3), ceiling)
	if hu, hi := headroom(ru, user, ceiling), headroom(ri, Use{}, ceiling); !near(hu, 140) || !near(hi, 140) {
		t.Fatalf("room below the ceiling %.1f for the user, %.1f for each newcomer, want 140 each of 420", hu, hi)
	}
}

// headroom is the room below the ceiling a resume share leaves own.
func headroom(resumeTokens int64, own Use, ceiling float64) float64 {
	return float64(resumeTokens)*ceiling - own.Tokens
}

// near: equal but for the rounding of a share up to a whole token.
func near(got, want float64) bool { return got >= want && got <= want+1 }

// The room below the ceiling goes to the replica whose waiting program
// paused first, up to all it waits for, though another waits too; in
// proportion to what each waits for (240 of 400) its 300 would not fit.
func TestTheOldestWaiterTakesTheRoom(t *testing.T) {
	const ceiling = 0.8
	a := Use{Tokens: 200, Users: 1, Waiting: Demand{Tokens: 300, Since: t0}}
	b := Use{Tokens: 200, Users: 1, Waiting: Demand{Tokens: 200, Since: t0.Add(time.Second)}}
	ha := headroom(resumeShare(1000, a, b, freePart(a, b, 2), ceiling), a, ceiling)
	hb := headroom(resumeShare(1000, b, a, freePart(b, a, 2), ceiling), b, ceiling)
	if !near(ha, 300) || !near(hb, 100) {
		t.Fatalf("room %.1f for the oldest waiter's replica, %.1f for the other, want 300 and 100 of 400", ha, hb)
	}
}

// Programs with a turn waiting come before paused ones with none, however
// long those have been paused: as one controller's resume step takes them.
func TestWaitingTurnsBeforePausedPrograms(t *testing.T) {
	const ceiling = 0.8
	a := Use{Tokens: 200, Users: 1, Paused: Demand{Tokens: 300, Since: t0}}
	b := Use{Tokens: 200, Users: 1, Waiting: Demand{Tokens: 300, Since: t0.Add(time.Hour)}}
	ha := headroom(resumeShare(1000, a, b, freePart(a, b, 2), ceiling), a, ceiling)
	hb := headroom(resumeShare(1000, b, a, freePart(b, a, 2), ceiling), b, ceiling)
	if !near(hb, 300) || !near(ha, 100) {
		t.Fatalf("room %.1f for the waiting turn's replica, %.1f for the paused one's, want 300 and 100 of 400", hb, ha)
	}
}

// The replicas' rooms below the ceiling never sum past the worker's (a
// replica that is not the oldest leaves the others' whole demand, so
// they may sum to less while programs wait); with nobody asking they are
// all of it.
func TestResumeSharesSumToTheRoom(t *testing.T) {
	const ceiling = 0.85
	r := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		replicas := 2 + r.IntN(4)
		total := 1_000 + r.Int64N(1_000_000)
		asking := r.IntN(2) == 0
		uses := make([]Use, replicas)
		var all Use
		for i := range uses {
			uses[i] = Use{Tokens: r.Float64() * float64(total) / float64(replicas)}
			if uses[i].Tokens > 0 {
				uses[i].Users = 1
			}
			if asking {
				uses[i].Waiting = Demand{Tokens: r.Float64() * float64(total) / 4, Since: t0.Add(time.Duration(r.IntN(1000)) * time.Second)}
				uses[i].Paused = Demand{Tokens: r.Float64() * float64(total) / 4, Since: t0.Add(time.Duration(r.IntN(1000)) * time.Second)}
			}
			all = all.Add(uses[i])
		}
		room := float64(total)*ceiling - all.Tokens
		if room <= 0 {
			continue // Tokens holds (TestSharesSumToTheCapacity)
		}
		var sum float64
		for _, u := range uses {
			others := Use{Tokens: all.Tokens - u.Tokens, Users: all.Users - u.Users,
				Waiting: othersDemand(uses, u, func(u Use) Demand { return u.Waiting }),
				Paused:  othersDemand(uses, u, func(u Use) Demand { return u.Paused })}
			h := headroom(resumeShare(total, u, others, freePart(u, others, replicas), ceiling), u, ceiling)
			if h < 0 {
				t.Fatalf("a replica's room %.1f below the ceiling is negative", h)
			}
			sum += h
		}
		if sum > room+float64(replicas) || (!asking && sum < room) {
			t.Fatalf("%d replicas, room %.1f, asking %v: their rooms sum to %.1f", replicas, room, asking, sum)
		}
	}
}

// othersDemand sums one demand of every use but own.
func othersDemand(uses []Use, own Use, d func(Use) Demand) Demand {
	var sum Demand
	for _, u := range uses {
		if u != own {
			sum = sum.add(d(u))
		}
	}
	return sum
}

// A controller tells the others what its paused programs ask for: one
// that has run a turn and has another waiting in Waiting, its working set
// and buffer since it paused.
func TestUseOfTellsWhatWaits(t *testing.T) {
	c := pauseSmall(t)
	if u := c.UsesOf([]string{"a"})[0]; u.Waiting != (Demand{}) || u.Paused != (Demand{Tokens: 2_100, Since: t0}) {
		t.Fatalf("paused with no turn waiting: %+v", u)
	}
	c.Admit(t0.Add(time.Second), Turn{Key: key("small"), PromptTokens: 2_100}, nil)
	if u := c.UsesOf([]string{"a"})[0]; u.Waiting != (Demand{Tokens: 2_200, Since: t0}) || u.Paused != (Demand{}) {
		t.Fatalf("paused with a turn waiting: %+v", u)
	}
}

// What a tick resumes into its share does not read, at the same tick's
// pause step, as over the share from before the resume: the share is
// computed again, and nothing is shed for the resumed program.
func TestAResumeIsNotShedAtTheSameTick(t *testing.T) {
	c := newCtl(t, func(cfg *Config) { cfg.ActingDecayTau, cfg.ResumeHysteresis = 0, 0.05 })
	c.SetWorker("a", Capacity{Tokens: 1_000})
	acting(t, c, t0, "small", 200, "a")
	start(t, c, t0, "big", 600, "a")
	if rep := c.Tick(t0); rep.Paused != 1 {
		t.Fatalf("setup tick %+v", rep)
	}
	c.Finish(t0, key("big"), 550, 50, nil)
	c.Admit(t0.Add(time.Second), Turn{Key: key("small"), PromptTokens: 200}, nil)
	// Another replica uses 300 of a worker of 1,450: 1,000 used, 305 of
	// room below the 0.90 ceiling, which small's 300 takes. The share of
	// 700 of 1,000 used, 1,015, would read 1,000 as over 0.95 of it.
	c.SetShares(map[string]Capacity{"a": {Tokens: 1_450}}, func(string) Use { return Use{Tokens: 300, Users: 1} }, 2, 0)
	rep := c.Tick(t0.Add(2 * time.Second))
	if rep.Resumed != 1 || rep.Paused != 0 || prog(t, c, "big").Lifecycle != Active {
		t.Fatalf("tick %+v, big %v: want small resumed and nothing shed", rep, prog(t, c, "big").Lifecycle)
	}
}

// The cold lane is the fleet's: a replica may fill the slots the others do
// not hold, none when they hold them all; one replica keeps the configured
// lane.
func TestShareOfTheColdLane(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ColdLane = 2
	c, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	total := Capacity{Tokens: 1000, MaxPrograms: 8}
	for _, tc := range []struct{ othersCold, want int }{{0, 2}, {1, 1}, {2, -1}, {3, -1}} {
		if got := c.shareOf(sharing{total: total, others: Use{Cold: tc.othersCold}, replicas: 3, own: c.UsesOf([]string{"w"})[0]}).ColdSlots; got != tc.want {
			t.Errorf("others hold %d cold slots: ColdSlots %d, want %d", tc.othersCold, got, tc.want)
		}
	}
	if got := c.shareOf(sharing{total: total, others: Use{Cold: 2}, replicas: 1, own: c.UsesOf([]string{"w"})[0]}); got != total {
		t.Errorf("one replica: %+v, want the whole %+v", got, total)
	}
}

// A worker keeps its share while the share's inputs are unchanged (share),
// and SetShares under an unchanged version computes again only the workers
// whose own use changed (shareMemo): under a random workload of a replica
// whose peers' use and workers' capacities change now and then, with and
// without the cold lane, right after every SetShares each worker's capacity
// is exactly the share computed afresh from its inputs at that moment, and
// the kept demand is the paused programs' summed afresh.
func TestSharesKeptOnlyWhileTheirInputsHold(t *testing.T) {
	lane := DefaultConfig()
	lane.HeldFromIndex = false
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := newCtl(t, func(c *Config) {
				if seed%2 == 1 { // the cold lane, rotation and retention on
					*c = lane
				}
			})
			workers := []string{"w0", "w1", "w2", "w3"}
			totals := map[string]Capacity{}
			for _, w := range workers {
				totals[w] = Capacity{Tokens: int64(20_000 + rng.IntN(40_000)), MaxPrograms: 8}
				c.SetWorker(w, totals[w])
			}
			// A few states of the peers, so that inputs repeat.
			heard := []map[string]Use{{}, {"w0": {Tokens: 9_000, Users: 1}}, {"w1": {Tokens: 30_000, Users: 1}, "w3": {Tokens: 2_000, Users: 1, Reasoning: 2}}}
			peersNow, replicas := heard[0], 3
			version := uint64(1) // what the caller says of totals and peersNow
			now := t0
			inflight := map[string]bool{}
			waiters := map[string]*Waiter{}
			var sessions []string
			for step := range 2000 {
				now = now.Add(time.Duration(rng.IntN(3_000)) * time.Millisecond)
				s := fmt.Sprintf("s%02d", rng.IntN(30))
				switch op := rng.IntN(10); {
				case op < 4 && !inflight[s] && waiters[s] == nil:
					a := c.Admit(now, Turn{Key: key(s), PromptTokens: int64(500 + rng.IntN(8_000))}, nil)
					if a.Verdict == Wait {
						waiters[s] = a.Waiter
					}
					if a.Verdict == Run {
						inflight[s] = true
						sessions = append(sessions, s)
						if a.Worker == "" {
							c.Placed(now, key(s), workers[rng.IntN(len(workers))])
						}
					}
				case op < 7 && inflight[s]:
					inflight[s] = false
					c.Finish(now, key(s), int64(500+rng.IntN(8_000)), int64(rng.IntN(500)), nil)
				case op < 8:
					c.Tick(now)
				case op < 9 && rng.IntN(4) == 0:
					replicas = 2 + rng.IntN(2) // a count is not a version's
				case op < 9:
					peersNow, replicas = heard[rng.IntN(len(heard))], 2+rng.IntN(2)
					version++
				case waiters[s] != nil && rng.IntN(2) == 0: // its client gives up waiting
					c.Abandon(now, waiters[s], true)
					delete(waiters, s)
				default:
					// Down to capacities an oversized program is resumed
					// into (resumeNeed), up to roomy ones.
					w := workers[rng.IntN(len(workers))]
					totals[w] = Capacity{Tokens: int64(3_000 + rng.IntN(57_000)), MaxPrograms: 4 + rng.IntN(8)}
					switch rng.IntN(4) {
					case 0: // the totals alone change (a version says so)
					case 1:
						c.SetWorker(w, totals[w])
					case 2: // the worker leaves and comes back
						c.RemoveWorker(now, w)
						c.SetWorker(w, totals[w])
					default: // it leaves, until a capacity brings it back
						c.RemoveWorker(now, w)
						delete(totals, w)
					}
					version++
				}
				v := version
				if rng.IntN(10) == 0 {
					v = 0 // a caller that does not know
				}
				c.SetShares(totals, func(w string) Use { return peersNow[w] }, replicas, v)
				waiting, paused := c.sumDemand()
				if kw, kp := c.demand(); kw != waiting || kp != paused {
					t.Fatalf("step %d: kept demand %+v %+v, summed afresh %+v %+v", step, kw, kp, waiting, paused)
				}
				for _, w := range workers {
					if _, ok := totals[w]; !ok {
						continue // gone
					}
					fresh := sharing{total: totals[w], others: peersNow[w], replicas: replicas, own: c.useOf(w, waiting, paused)}
					if want, got := c.shareOf(fresh), c.workers[w].cap; got != want {
						t.Fatalf("step %d: %s has the capacity %+v, its inputs now give %+v", step, w, got, want)
					}
				}
			}
			if len(sessions) == 0 {
				t.Fatal("no turn ran")
			}
		})
	}
}

// A worker shared among replicas is resumed up to ReplicaResumeMargin below
// the ceiling one scheduler resumes it to, on both the packing side and the
// room its share leaves for resuming; whole again, it has the full ceiling.
func TestReplicasResumeBelowAMargin(t *testing.T) {
	d := DefaultConfig()
	c := newCtl(t, func(cfg *Config) { *cfg = d })
	total := Capacity{Tokens: 100_000, MaxPrograms: 8}
	c.SetWorker("w", total)
	if got := c.resumeCeiling(c.workers["w"]); got != d.ResumeCeiling() {
		t.Fatalf("whole worker: ceiling %v, want %v", got, d.ResumeCeiling())
	}
	start(t, c, t0, "a", 60_000, "w")
	c.SetShares(map[string]Capacity{"w": total}, func(string) Use { return Use{} }, 3, 0)
	want := d.ResumeCeiling() - d.ReplicaResumeMargin
	if got := c.resumeCeiling(c.workers["w"]); math.Abs(got-want) > 1e-12 {
		t.Fatalf("shared worker: ceiling %v, want %v", got, want)
	}
	// The room the share leaves for resuming is the ceiling's: with no
	// margin it is larger by the margin's worth of the worker, in this
	// replica's part of it (a third: the others hold nothing there).
	noMargin := newCtl(t, func(cfg *Config) { *cfg = d; cfg.ReplicaResumeMargin = 0 })
	noMargin.SetWorker("w", total)
	start(t, noMargin, t0, "a", 60_000, "w")
	noMargin.SetShares(map[string]Capacity{"w": total}, func(string) Use { return Use{} }, 3, 0)
	room := func(c *Controller) float64 {
		w := c.workers["w"]
		return float64(w.cap.ResumeTokens)*c.resumeCeiling(w) - w.used(&c.cfg)
	}
	if got, wantDiff := room(noMargin)-room(c), d.ReplicaResumeMargin*float64(total.Tokens)/3; math.Abs(got-wantDiff) > 0.02*wantDiff {
		t.Fatalf("resume room without the margin exceeds the margin's by %.0f tokens, want about %.0f", got, wantDiff)
	}
	c.SetWorker("w", total)
	if got := c.resumeCeiling(c.workers["w"]); got != d.ResumeCeiling() {
		t.Fatalf("whole again: ceiling %v, want %v", got, d.ResumeCeiling())
	}
}
