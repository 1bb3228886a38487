package servicekit

import "sync/atomic"

// callWorkers runs a call stream's calls on goroutines kept between calls.
// A goroutine started for each call begins on a small stack and, at the
// depth of a handler under its interceptors (tracing, metrics, logging,
// recovery, then the service's own work), grows it by copying, call after
// call: in the scheduler that copying was about a tenth of its CPU per turn
// (runtime.newstack under serverCalls.run in the mesh's profile). A kept
// worker's stack has already grown (until a garbage collection shrinks an
// idle one, after which its next call grows it once).
//
// Calls may wait (Route waits for admission), so a call never waits for a
// worker: one that finds none idle gets a goroutine of its own, which stays
// on as a worker afterwards while fewer than maxKeptCallWorkers are kept,
// idle or busy.
type callWorkers struct {
	calls chan func() // unbuffered: a send succeeds only into an idle worker
	done  <-chan struct{}
	kept  atomic.Int32
}

// maxKeptCallWorkers bounds the workers kept, idle or busy: about the calls
// a busy server runs at once, so that a burst of waiting calls does not
// leave thousands of goroutines (and their grown stacks) behind. Past it,
// while as many calls wait, each further call runs on a goroutine of its
// own, as before there were workers.
const maxKeptCallWorkers = 64

func newCallWorkers(done <-chan struct{}) *callWorkers {
	return &callWorkers{calls: make(chan func()), done: done}
}

// run runs call on an idle worker or, with none idle, a new goroutine.
func (w *callWorkers) run(call func()) {
	select {
	case w.calls <- call:
	default:
		go w.work(call)
	}
}

// work runs call, then, while the server serves and there is room among
// the kept, every call handed to it.
func (w *callWorkers) work(call func()) {
	call()
	if w.kept.Add(1) > maxKeptCallWorkers {
		w.kept.Add(-1)
		return
	}
	defer w.kept.Add(-1)
	for {
		select {
		case call := <-w.calls:
			call()
		case <-w.done:
			return
		}
	}
}
