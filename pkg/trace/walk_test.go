package trace

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// walkReport is what a driver tells a walk.
type walkReport uint8

const (
	rStart walkReport = iota
	rGap
	rChild
	rTurn
)

func (r walkReport) String() string {
	return [...]string{"Start", "GapDone", "ChildDone", "TurnDone"}[r]
}

func (r walkReport) on(w *Walk) Next {
	switch r {
	case rStart:
		return w.Start()
	case rGap:
		return w.GapDone()
	case rChild:
		return w.ChildDone()
	}
	return w.TurnDone()
}

type scriptStep struct {
	r    walkReport
	want Next
}

// TestWalk scripts each walk: the reports a driver makes, in one order it
// may make them, and what the walk must answer to each.
func TestWalk(t *testing.T) {
	turn := func(children ...int) Turn { return Turn{InputLen: 1, Gap: time.Second, Children: children} }
	gap := func(turn int, start ...int) Next { return Next{Start: start, Do: WaitGap, Turn: turn} }
	send := func(turn int) Next { return Next{Do: SendTurn, Turn: turn} }
	idle := Next{}
	end := Next{Do: EndSession}
	tests := []struct {
		name     string
		s        Session
		from, to int // to < 0: every turn
		steps    []scriptStep
	}{{
		name: "sub-agents before a turn: it waits for its gap and for them",
		s:    Session{Turns: []Turn{turn(1, 2), turn()}},
		to:   -1,
		steps: []scriptStep{
			{rStart, gap(0, 1, 2)},
			{rGap, idle},
			{rChild, idle},
			{rChild, send(0)}, // the last sub-agent, after the gap, sends it
			{rTurn, gap(1)},
			{rGap, send(1)},
			{rTurn, end},
		},
	}, {
		name: "sub-agents that end before the gap: the gap sends the turn",
		s:    Session{Turns: []Turn{turn(), turn(1)}},
		to:   -1,
		steps: []scriptStep{
			{rStart, gap(0)},
			{rGap, send(0)},
			{rTurn, gap(1, 1)},
			{rChild, idle},
			{rGap, send(1)},
			{rTurn, end},
		},
	}, {
		name: "tail sub-agents: the session ends after the last of them",
		s:    Session{Turns: []Turn{turn()}, Tail: []int{1, 2}},
		to:   -1,
		steps: []scriptStep{
			{rStart, gap(0)},
			{rGap, send(0)},
			{rTurn, Next{Start: []int{1, 2}}},
			{rChild, idle},
			{rChild, end},
		},
	}, {
		name:  "zero turns and no tail: it ends as it starts",
		s:     Session{},
		to:    -1,
		steps: []scriptStep{{rStart, end}},
	}, {
		name: "zero turns: only the tail",
		s:    Session{Tail: []int{3}},
		to:   -1,
		steps: []scriptStep{
			{rStart, Next{Start: []int{3}}},
			{rChild, end},
		},
	}, {
		// replay's running fleet joins a session mid-way: the earlier
		// turns' sub-agents are not started, the join turn's are.
		name: "joined at a later turn",
		s:    Session{Turns: []Turn{turn(1), turn(), turn(2)}, Tail: []int{3}},
		from: 2, to: -1,
		steps: []scriptStep{
			{rStart, gap(2, 2)},
			{rChild, idle},
			{rGap, send(2)},
			{rTurn, Next{Start: []int{3}}},
			{rChild, end},
		},
	}, {
		// loadgen's --max-turns: the later turns' sub-agents are skipped,
		// the tail is not.
		name: "cut short: its tail still runs",
		s:    Session{Turns: []Turn{turn(), turn(1)}, Tail: []int{2}},
		to:   1,
		steps: []scriptStep{
			{rStart, gap(0)},
			{rGap, send(0)},
			{rTurn, Next{Start: []int{2}}},
			{rChild, end},
		},
	}, {
		name: "joined past its last turn: only the tail",
		s:    Session{Turns: []Turn{turn(1)}, Tail: []int{2}},
		from: 1, to: -1,
		steps: []scriptStep{
			{rStart, Next{Start: []int{2}}},
			{rChild, end},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			to := tc.to
			if to < 0 {
				to = len(tc.s.Turns)
			}
			w := NewWalk(&tc.s, tc.from, to)
			for i, st := range tc.steps {
				if w.Done() {
					t.Fatalf("step %d: done before %v", i, st.r)
				}
				if diff := cmp.Diff(st.want, st.r.on(&w), cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("step %d, %v (-want +got):\n%s", i, st.r, diff)
				}
			}
			if !w.Done() {
				t.Errorf("not done after the script")
			}
		})
	}
}

// TestWalkMisuse checks that a report the walk cannot be in panics rather
// than sending a turn twice or ending a session early.
func TestWalkMisuse(t *testing.T) {
	s := &Session{ID: "s", Turns: []Turn{{InputLen: 1, Children: []int{1}}}}
	tests := []struct {
		name    string
		reports []walkReport // the last one must panic
	}{
		{"report before Start", []walkReport{rGap}},
		{"Start twice", []walkReport{rStart, rStart}},
		{"the gap twice", []walkReport{rStart, rGap, rGap}},
		{"more sub-agents than started", []walkReport{rStart, rChild, rChild}},
		{"a turn done before it is sent", []walkReport{rStart, rGap, rTurn}},
		{"a report after the end", []walkReport{rStart, rGap, rChild, rTurn, rChild}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWalk(s, 0, 1)
			last := len(tc.reports) - 1
			for _, r := range tc.reports[:last] {
				r.on(&w)
			}
			defer func() {
				if recover() == nil {
					t.Errorf("%v did not panic", tc.reports[last])
				}
			}()
			tc.reports[last].on(&w)
		})
	}
}

// TestWalkTrees drives random session trees with the reports in random
// order, as an event-driven driver may make them, and checks each walk
// against what the tree means: its turns sent once each, in order, each
// after its gap and after its sub-agents ended; its end after its last
// turn and its tail, once.
func TestWalkTrees(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			w := randomTree(rng)
			if err := w.Validate(); err != nil {
				t.Fatal(err)
			}
			driveTree(t, rng, w)
		})
	}
}

// randomTree builds a workload of up to 12 sessions: session 0 at the top,
// each later one a sub-agent of an earlier one, before one of its turns or
// in its tail.
func randomTree(rng *rand.Rand) *Workload {
	w := &Workload{Name: "tree", BlockSize: 1}
	n := 1 + rng.IntN(12)
	for i := range n {
		s := &Session{ID: fmt.Sprint(i), Parent: -1}
		for range rng.IntN(4) {
			s.Turns = append(s.Turns, Turn{InputLen: 1})
		}
		if i > 0 {
			s.Parent = rng.IntN(i)
			p := w.Sessions[s.Parent]
			if j := rng.IntN(len(p.Turns) + 1); j < len(p.Turns) {
				p.Turns[j].Children = append(p.Turns[j].Children, i)
			} else {
				p.Tail = append(p.Tail, i)
			}
		}
		w.Sessions = append(w.Sessions, s)
	}
	return w
}

// driveTree runs every walk of w to its end, one random pending event at a
// time: a gap passing, a sent turn completing, an ended sub-agent reported
// (or reported at once).
func driveTree(t *testing.T, rng *rand.Rand, w *Workload) {
	t.Helper()
	walks := make([]Walk, len(w.Sessions))
	sent := make([]int, len(w.Sessions)) // turns sent so far
	gapped := make([]bool, len(w.Sessions))
	ended := make([]bool, len(w.Sessions))
	type event struct {
		r walkReport
		i int
	}
	var pending []event
	var act func(i int, nx Next)
	act = func(i int, nx Next) {
		s := w.Sessions[i]
		if nx.Do == WaitGap {
			gapped[i] = false
		}
		for _, c := range nx.Start {
			walks[c] = NewWalk(w.Sessions[c], 0, len(w.Sessions[c].Turns))
			act(c, walks[c].Start())
		}
		switch nx.Do {
		case WaitGap:
			if nx.Turn != sent[i] {
				t.Fatalf("session %d waits the gap of turn %d, want %d", i, nx.Turn, sent[i])
			}
			pending = append(pending, event{rGap, i})
		case SendTurn:
			if nx.Turn != sent[i] || !gapped[i] {
				t.Fatalf("session %d sends turn %d (gap passed: %v), want turn %d after its gap", i, nx.Turn, gapped[i], sent[i])
			}
			for _, c := range s.Turns[nx.Turn].Children {
				if !ended[c] {
					t.Fatalf("session %d sends turn %d before its sub-agent %d ended", i, nx.Turn, c)
				}
			}
			sent[i]++
			pending = append(pending, event{rTurn, i})
		case EndSession:
			if ended[i] || sent[i] != len(s.Turns) {
				t.Fatalf("session %d ends (again: %v) after %d of %d turns", i, ended[i], sent[i], len(s.Turns))
			}
			for _, c := range s.Tail {
				if !ended[c] {
					t.Fatalf("session %d ends before its tail sub-agent %d", i, c)
				}
			}
			ended[i] = true
			switch {
			case s.Parent < 0:
			case rng.IntN(2) == 0:
				// As replay's sub-agents with nothing to send do: the end
				// reaches the parent at once, maybe while the parent is
				// still starting its siblings.
				act(s.Parent, walks[s.Parent].ChildDone())
			default:
				pending = append(pending, event{rChild, s.Parent})
			}
		}
	}
	walks[0] = NewWalk(w.Sessions[0], 0, len(w.Sessions[0].Turns))
	act(0, walks[0].Start())
	for len(pending) > 0 {
		k := rng.IntN(len(pending))
		e := pending[k]
		pending = append(pending[:k], pending[k+1:]...)
		if e.r == rGap {
			gapped[e.i] = true
		}
		act(e.i, e.r.on(&walks[e.i]))
	}
	for i := range w.Sessions {
		if !ended[i] || !walks[i].Done() {
			t.Errorf("session %d never ended (walk done: %v)", i, walks[i].Done())
		}
	}
}
