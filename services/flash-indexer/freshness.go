package flashindexer

import (
	"iter"
	"sync"
	"time"
)

// freshness says, per worker, whether the index may still count the worker's
// blocks as hits. Evidence that the worker's KV event stream is live — a
// snapshot loaded, a batch applied, a probe answered over the connection of an
// open subscription — keeps a worker fresh. A worker without any for longer
// than the bound is stale from then on (the latch holds even if evidence comes
// back later) until its next snapshot is loaded: while its stream was down the
// index missed its stores and removals, and only a snapshot says what it holds
// now. Times are passed in; it starts no goroutine and reads no clock.
type freshness struct {
	bound time.Duration // ≤ 0: never stale

	mu      sync.RWMutex
	workers map[string]*workerFreshness
}

type workerFreshness struct {
	alive   time.Time // last evidence the event stream was live
	streams int       // subscriptions open now (opened, not yet ended)
	stale   bool      // latched: demoted until the next snapshot
	// reported is what the shell last announced (log, metric), so each
	// transition is announced once.
	reported bool
}

func newFreshness(bound time.Duration) *freshness {
	return &freshness{bound: bound, workers: map[string]*workerFreshness{}}
}

// past reports whether w has gone longer than the bound without evidence.
// Needs f.mu.
func (f *freshness) past(w *workerFreshness, now time.Time) bool {
	return f.bound > 0 && now.Sub(w.alive) > f.bound
}

// latch records what the clock says before new evidence counts: evidence that
// comes after the bound passed does not undo it. Needs f.mu held for writing.
func (f *freshness) latch(w *workerFreshness, now time.Time) {
	if f.past(w, now) {
		w.stale = true
	}
}

// resynced records that the worker was reloaded from its snapshot: fresh again.
func (f *freshness) resynced(worker string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		w = &workerFreshness{}
		f.workers[worker] = w
	}
	w.alive, w.stale = now, false
}

// applied records a batch from the worker's stream.
func (f *freshness) applied(worker string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.workers[worker]; w != nil {
		f.latch(w, now)
		w.alive = now
	}
}

// opened and ended track the worker's subscriptions: a probe proves the
// stream live only while one is open.
func (f *freshness) opened(worker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.workers[worker]; w != nil {
		w.streams++
	}
}

func (f *freshness) ended(worker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.workers[worker]; w != nil && w.streams > 0 {
		w.streams--
	}
}

// probed records that the worker answered over its subscription's
// connection. It reports whether the worker is stale, so the shell can make
// the subscription reload the snapshot now that the worker is reachable.
func (f *freshness) probed(worker string, now time.Time) (stale bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		return false
	}
	f.latch(w, now)
	if w.streams > 0 {
		w.alive = now
	}
	return w.stale
}

// removed forgets a worker that left the fleet.
func (f *freshness) removed(worker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.workers, worker)
}

// isStale reports whether the worker's blocks must not count as hits now.
func (f *freshness) isStale(worker string, now time.Time) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	w := f.workers[worker]
	return w != nil && (w.stale || f.past(w, now))
}

// staleAmong returns which of the workers are stale now (nil when none is,
// the common case, without allocating).
func (f *freshness) staleAmong(workers iter.Seq[string], now time.Time) map[string]bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out map[string]bool
	for id := range workers {
		if w := f.workers[id]; w != nil && (w.stale || f.past(w, now)) {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}

// transition is a change of a worker's state the shell has not announced.
type transition struct {
	worker string
	stale  bool
	since  time.Time // the last evidence (when it went stale)
}

// check latches every worker past the bound and returns the transitions
// since the last check, each once.
func (f *freshness) check(now time.Time) []transition {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []transition
	for id, w := range f.workers {
		f.latch(w, now)
		if w.stale != w.reported {
			w.reported = w.stale
			out = append(out, transition{worker: id, stale: w.stale, since: w.alive})
		}
	}
	return out
}

// count is the number of stale workers now.
func (f *freshness) count(now time.Time) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for _, w := range f.workers {
		if w.stale || f.past(w, now) {
			n++
		}
	}
	return n
}
