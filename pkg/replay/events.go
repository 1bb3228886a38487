package replay

import (
	"container/heap"
	"fmt"
	"time"

	"switchyard.dev/pkg/admission"
)

type evKind uint8

const (
	evStep  evKind = iota // a worker's step ends (and the next one starts)
	evTurn                // a session's tool gap is over
	evStart               // one of the first sessions joins
	evTick                // admission control tick
	evRetry               // a shed session's client tries again
	evHints               // hint emitter tick
	evWarm                // the warmup ends: the window opens
	evEnd                 // the window closes
	evSync                // scheduler replicas publish their uses (replicas.go)
)

type event struct {
	at   time.Duration
	seq  uint64 // FIFO among equal times: determinism
	kind evKind
	arg  int
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (s *sim) push(at time.Duration, k evKind, arg int) {
	s.seq++
	heap.Push(&s.q, event{at: at, seq: s.seq, kind: k, arg: arg})
}

func (s *sim) loop() error {
	var stalled int
	for n := 0; s.q.Len() > 0 && !s.stopped; n++ {
		if s.cfg.Done != nil && n&4095 == 0 {
			select {
			case <-s.cfg.Done:
				return ErrAborted
			default:
			}
		}
		e := heap.Pop(&s.q).(event)
		s.now = e.at
		if p := s.cfg.Progress; p != nil && s.now-s.lastProg >= time.Second {
			s.lastProg = s.now
			p(s.now, s.end)
		}
		switch e.kind {
		case evStep:
			if err := s.step(e.arg, &stalled); err != nil {
				return err
			}
		case evTurn:
			s.follow(e.arg, s.sessions[e.arg].walk.GapDone(), ownGap)
		case evStart:
			st := s.starting[e.arg]
			s.pending--
			s.startTop(st.draw, st.traceIdx, st.turn, st.gapLeft)
		case evTick: // replica arg's admission tick
			s.answerHoldings(e.arg)
			s.rep.share(e.arg, s.now, s.byID)
			rep := s.rep.pipes[e.arg].Tick(s.at()).Admission
			if s.recording() {
				s.record(Call{Op: CallTick, Replica: e.arg, Events: rep.Events, Others: s.rep.othersOf(e.arg, s.now)})
			}
			s.win.paused(rep.Paused)
			s.observeAdmission(rep.Events)
			s.wake()
			s.push(s.now+s.tickInterval(), evTick, e.arg)
		case evSync:
			s.rep.publish(s.now)
			s.push(s.now+s.rep.every, evSync, 0)
		case evRetry:
			if ri := s.sessions[e.arg].parked; ri >= 0 {
				s.dispatch(ri)
			}
		case evHints:
			s.decideHints()
			s.push(s.now+s.hints.tick, evHints, 0)
		case evWarm:
			s.openWindow()
		case evEnd:
			s.closeWindow()
			s.stopped = true
		}
	}
	if !s.stopped {
		return fmt.Errorf("replay: stuck at %v with %d sessions active (%d parked)", s.now, s.active, len(s.parked))
	}
	return nil
}

// tickInterval is how often the scheduler's control step runs: admission's
// tick, or the scheduler's default without admission control.
func (s *sim) tickInterval() time.Duration {
	if s.ctrl != nil {
		return s.ctrl.Config().TickInterval
	}
	return admission.DefaultConfig().TickInterval
}
