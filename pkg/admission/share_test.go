package admission

import (
	"math/rand/v2"
	"testing"
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
// none.
func TestShareOfANewcomer(t *testing.T) {
	c := Capacity{Tokens: 900, MaxPrograms: 9}
	user := Use{Tokens: 300, Reasoning: 3, Users: 1}
	idle := Share(c, Use{}, user, 3)
	if idle.Tokens != 200 || idle.MaxPrograms != 2 {
		t.Fatalf("a newcomer's share %+v, want 200 tokens and 2 programs", idle)
	}
	// The one replica that uses the worker gets what the two idle ones do
	// not: the shares still sum to the worker.
	if u := Share(c, user, Use{}, 3); u.Tokens+2*idle.Tokens != 900 || u.MaxPrograms+2*idle.MaxPrograms != 9 {
		t.Fatalf("the user's share %+v and two idle ones' %+v do not sum to %+v", u, idle, c)
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
		if got := c.ShareOf(total, "w", Use{Cold: tc.othersCold}, 3).ColdSlots; got != tc.want {
			t.Errorf("others hold %d cold slots: ColdSlots %d, want %d", tc.othersCold, got, tc.want)
		}
	}
	if got := c.ShareOf(total, "w", Use{Cold: 2}, 1); got != total {
		t.Errorf("one replica: %+v, want the whole %+v", got, total)
	}
}
