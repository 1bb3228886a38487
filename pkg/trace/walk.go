package trace

import "fmt"

// Walk is where one run of a session stands in its tree of sub-agents: the
// turn it sends next, the sub-agents that turn still waits for, whether its
// tool gap has passed, and the tail (the sub-agents started after the last
// turn, which the session waits for before it ends). Both drivers of a
// trace, the replay simulator (events on virtual time) and loadgen
// (goroutines against a live endpoint), ask it what comes next, so a
// session's tree means one thing however it is driven.
//
// A walk is a step per turn: the step starts the turn's Children and its
// Gap together, and the turn is sent once both are over. After the last
// turn the tail starts, and the session ends when it is over. The driver
// does the mechanics (starting sub-agents, timing gaps, sending turns) and
// reports what happened; every method returns what the driver must do
// next. A walk never reads a clock and starts nothing itself: what a gap
// lasts (capped, scaled, skipped) is the driver's choice.
//
// A walk is not safe for concurrent use; ChildDone may be called while the
// driver is still starting the sub-agents of the Next that counted them (a
// sub-agent that ends at once), the others only once the driver has acted
// on the previous Next.
type Walk struct {
	s       *Session
	next    int // the turn the current step leads to
	end     int // turns from end on are not walked
	kids    int // sub-agents still running that the step (or the tail) waits for
	gapDone bool
	phase   walkPhase
}

type walkPhase uint8

const (
	walkNew  walkPhase = iota // Start not called yet
	walkStep                  // before turn next: its sub-agents and its gap
	walkSent                  // turn next is sent and not completed
	walkTail                  // the turns are done: the tail's sub-agents run
	walkDone
)

// Action is what a driver must do after starting a Next's sub-agents.
type Action uint8

const (
	// Idle: nothing; the walk waits for a sub-agent to end (ChildDone) or
	// the gap to pass (GapDone).
	Idle Action = iota
	// WaitGap: wait for turn Next.Turn's tool gap, then call GapDone.
	WaitGap
	// SendTurn: send turn Next.Turn, and call TurnDone when it completes.
	SendTurn
	// EndSession: the session is over; its parent's walk is told with
	// ChildDone.
	EndSession
)

func (a Action) String() string {
	switch a {
	case Idle:
		return "idle"
	case WaitGap:
		return "wait-gap"
	case SendTurn:
		return "send-turn"
	case EndSession:
		return "end-session"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Next is what a driver must do next: start the sub-agents in Start
// (indices into Workload.Sessions; each reports its end to this walk with
// ChildDone), then Do. Turn is the turn Do is about (WaitGap, SendTurn).
type Next struct {
	Start []int
	Do    Action
	Turn  int
}

// NewWalk walks session s from turn from to the turn before to, then its
// tail. A session joined mid-way (replay's running fleet) starts at a later
// turn: its earlier turns and their sub-agents are not walked, and its first
// step still starts the sub-agents of its first turn. A session cut short
// (loadgen's --max-turns) ends its turns early: the later turns' sub-agents
// are not walked either, but the tail is, as the session's end waits for it
// however many turns ran. to is clamped to s's turns; from at or past to
// walks only the tail.
func NewWalk(s *Session, from, to int) Walk {
	return Walk{s: s, next: max(from, 0), end: min(to, len(s.Turns))}
}

// Start begins the walk: the first step, the tail when there are no turns
// to walk, or the end when there is no tail either.
func (w *Walk) Start() Next {
	w.must(w.phase == walkNew, "Start")
	return w.step()
}

// GapDone reports that the current step's tool gap has passed. The turn is
// sent now when its sub-agents have ended too.
func (w *Walk) GapDone() Next {
	w.must(w.phase == walkStep && !w.gapDone, "GapDone")
	w.gapDone = true
	return w.ready()
}

// ChildDone reports that one of the sub-agents of the current step (or of
// the tail) has ended. The last one of a step sends its turn when the gap
// has passed; the last one of the tail ends the session.
func (w *Walk) ChildDone() Next {
	w.must((w.phase == walkStep || w.phase == walkTail) && w.kids > 0, "ChildDone")
	w.kids--
	if w.kids > 0 {
		return Next{}
	}
	if w.phase == walkTail {
		w.phase = walkDone
		return Next{Do: EndSession}
	}
	return w.ready()
}

// TurnDone reports that the sent turn has completed: the next step begins,
// or the tail after the last turn.
func (w *Walk) TurnDone() Next {
	w.must(w.phase == walkSent, "TurnDone")
	w.next++
	return w.step()
}

// Done says the walk has ended its session.
func (w *Walk) Done() bool { return w.phase == walkDone }

// step begins what precedes turn w.next: its sub-agents and its gap; past
// the last turn, the tail. The sub-agents are counted before the driver
// starts them, so one that ends at once finds them counted.
func (w *Walk) step() Next {
	if w.next >= w.end {
		w.phase, w.kids = walkTail, len(w.s.Tail)
		if w.kids == 0 {
			w.phase = walkDone
			return Next{Do: EndSession}
		}
		return Next{Start: w.s.Tail}
	}
	t := &w.s.Turns[w.next]
	w.phase, w.kids, w.gapDone = walkStep, len(t.Children), false
	return Next{Start: t.Children, Do: WaitGap, Turn: w.next}
}

// ready sends the step's turn once its gap has passed and its sub-agents
// have ended, whichever is last.
func (w *Walk) ready() Next {
	if !w.gapDone || w.kids > 0 {
		return Next{}
	}
	w.phase = walkSent
	return Next{Do: SendTurn, Turn: w.next}
}

// must panics on a report the walk cannot be in: a driver's bug, which
// would otherwise send a turn twice or end a session early.
func (w *Walk) must(ok bool, method string) {
	if !ok {
		panic(fmt.Sprintf("trace: Walk.%s of session %q in phase %d (turn %d, %d sub-agents running)", method, w.s.ID, w.phase, w.next, w.kids))
	}
}
