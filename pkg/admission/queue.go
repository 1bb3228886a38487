package admission

import (
	"container/heap"
	"time"
)

// Waiter is one turn blocked on a paused (or queued) program. Ready is
// closed when the program may proceed or is gone; the caller then calls
// Admit again with the same Waiter.
type Waiter struct {
	programID string
	queue     string // worker whose queue holds it ("" = unplaced)
	group     int    // 0 = returning program, 1 = new program
	seq       uint64
	index     int // heap position; -1 once out of the queue
	since     time.Time
	final     bool // the session's last turn (Turn.Final)
	ch        chan struct{}
	// claim: woken for a freed cold-lane slot, the worker whose slot is
	// held for it until it is admitted again or gives up (coldlane.go), and
	// that worker's state (claimOn: a worker that left and came back is
	// another state, whose slots this turn holds none of).
	claim   string
	claimOn *workerState
	// woken: the tick took it out of the queue to run, and it has not
	// come back yet (Controller.woken).
	woken bool
}

// Ready is closed when the turn should be re-admitted.
func (w *Waiter) Ready() <-chan struct{} { return w.ch }

// Since is when the turn started waiting.
func (w *Waiter) Since() time.Time { return w.since }

// waitQueue is one worker's priority queue of waiting turns: returning
// programs before new ones (a new program queues behind paused ones), then
// first come first served.
type waitQueue []*Waiter

func (q waitQueue) Len() int { return len(q) }
func (q waitQueue) Less(i, j int) bool {
	if q[i].group != q[j].group {
		return q[i].group < q[j].group
	}
	return q[i].seq < q[j].seq
}
func (q waitQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *waitQueue) Push(x any) {
	w := x.(*Waiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *waitQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}

// queues holds every worker's wait queue plus each program's waiters.
type queues struct {
	byWorker  map[string]*waitQueue
	byProgram map[string][]*Waiter
	// gen counts the changes to byProgram (the paused programs' demand
	// reads which have a turn waiting).
	gen uint64
}

func newQueues() queues {
	return queues{byWorker: map[string]*waitQueue{}, byProgram: map[string][]*Waiter{}}
}

func (qs *queues) push(w *Waiter) {
	q := qs.byWorker[w.queue]
	if q == nil {
		q = &waitQueue{}
		qs.byWorker[w.queue] = q
	}
	heap.Push(q, w)
	qs.byProgram[w.programID] = append(qs.byProgram[w.programID], w)
	qs.gen++
}

// remove takes one waiter out of its queue (it was woken, or gave up).
func (qs *queues) remove(w *Waiter) bool {
	if w.index < 0 {
		return false
	}
	q := qs.byWorker[w.queue]
	heap.Remove(q, w.index)
	if q.Len() == 0 {
		delete(qs.byWorker, w.queue)
	}
	ws := qs.byProgram[w.programID]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(qs.byProgram, w.programID)
	} else {
		qs.byProgram[w.programID] = ws
	}
	qs.gen++
	return true
}

// take removes and returns every waiter of a program, in queue order.
func (qs *queues) take(programID string) []*Waiter {
	ws := append([]*Waiter(nil), qs.byProgram[programID]...)
	for _, w := range ws {
		qs.remove(w)
	}
	return ws
}

// oldest is the waiter that has waited longest, or nil.
func (qs *queues) oldest() *Waiter {
	var o *Waiter
	for _, ws := range qs.byProgram {
		for _, w := range ws {
			if o == nil || w.since.Before(o.since) || (w.since.Equal(o.since) && w.seq < o.seq) {
				o = w
			}
		}
	}
	return o
}
