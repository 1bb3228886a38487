package flashindex

import (
	"iter"
	"sync"
	"sync/atomic"
	"time"
)

// Freshness says, per worker, whether the index may still count the worker's
// blocks as hits (the flash indexer's --stale-after). Evidence that the
// worker's KV event stream is live — a snapshot loaded, a batch applied, a
// probe answered over the connection of an open subscription — keeps a worker
// fresh. A worker without any for longer than the bound is stale from then on
// (the latch holds even if evidence comes back later) until its next snapshot
// is loaded: while its stream was down the index missed its stores and
// removals, and only a snapshot says what it holds now. The shell tells it
// what happened and when; it keeps no clock of its own. It is safe for
// concurrent use. The same rule serves any stream the shell follows (the
// flash indexer's shared pool too): a Watch reads one stream's state
// without the lock, for a check on every lookup.
type Freshness struct {
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
	// watched: a Watch reads seen, which mirrors alive and stale and is
	// replaced (never changed) under Freshness.mu.
	watched bool
	seen    atomic.Pointer[seen]
}

// seen is what a Watch reads: the last evidence and the latch.
type seen struct {
	alive time.Time
	stale bool
}

// publish mirrors w's evidence and latch for its Watch, if any. Needs
// Freshness.mu held for writing.
func (w *workerFreshness) publish() {
	if !w.watched {
		return
	}
	if s := w.seen.Load(); s == nil || s.stale != w.stale || !s.alive.Equal(w.alive) {
		w.seen.Store(&seen{alive: w.alive, stale: w.stale})
	}
}

// NewFreshness tracks workers against bound; a bound ≤ 0 never makes one
// stale.
func NewFreshness(bound time.Duration) *Freshness {
	return &Freshness{bound: bound, workers: map[string]*workerFreshness{}}
}

// past reports whether w has gone longer than the bound without evidence.
// Needs f.mu.
func (f *Freshness) past(w *workerFreshness, now time.Time) bool {
	return pastBound(f.bound, w.alive, now)
}

// pastBound is the one rule: longer than bound (> 0) since alive.
func pastBound(bound time.Duration, alive, now time.Time) bool {
	return bound > 0 && now.Sub(alive) > bound
}

// latch records what the clock says before new evidence counts: evidence that
// comes after the bound passed does not undo it. Needs f.mu held for writing.
func (f *Freshness) latch(w *workerFreshness, now time.Time) {
	if f.past(w, now) {
		w.stale = true
		w.publish()
	}
}

// Resynced records that the worker was reloaded from its snapshot: fresh again.
func (f *Freshness) Resynced(worker string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		w = &workerFreshness{}
		f.workers[worker] = w
	}
	w.alive, w.stale = now, false
	w.publish()
}

// Applied records a batch from the worker's stream.
func (f *Freshness) Applied(worker string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.workers[worker]; w != nil {
		f.latch(w, now)
		w.alive = now
		w.publish()
	}
}

// Opened and Ended track the worker's subscriptions: a probe proves the
// stream live only while one is open.
func (f *Freshness) Opened(worker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.workers[worker]; w != nil {
		w.streams++
	}
}

func (f *Freshness) Ended(worker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.workers[worker]; w != nil && w.streams > 0 {
		w.streams--
	}
}

// Probed records that the worker answered over its subscription's
// connection. It reports whether the worker is stale, so the shell can have
// the snapshot reloaded now that the worker is reachable.
func (f *Freshness) Probed(worker string, now time.Time) (stale bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		return false
	}
	f.latch(w, now)
	if w.streams > 0 {
		w.alive = now
		w.publish()
	}
	return w.stale
}

// Watch tracks worker from now on, stale until its first snapshot is loaded
// (Resynced) unless it is tracked already, and returns a reader of its
// state that takes no lock. It reads the worker until Removed (a Watch of a
// removed worker stays as it was).
func (f *Freshness) Watch(worker string) *Watch {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		// Nothing loaded is nothing to count, and nothing to announce.
		w = &workerFreshness{stale: true, reported: true}
		f.workers[worker] = w
	}
	w.watched = true
	w.publish()
	return &Watch{bound: f.bound, w: w}
}

// Watch reads one worker's state without Freshness's lock (Freshness.Watch).
type Watch struct {
	bound time.Duration
	w     *workerFreshness
}

// Stale is Freshness.Stale of the watched worker, in one atomic load.
func (v *Watch) Stale(now time.Time) bool {
	s := v.w.seen.Load()
	return s.stale || pastBound(v.bound, s.alive, now)
}

// Removed forgets a worker that left the fleet.
func (f *Freshness) Removed(worker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.workers, worker)
}

// Stale reports whether the worker's blocks must not count as hits now.
func (f *Freshness) Stale(worker string, now time.Time) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	w := f.workers[worker]
	return w != nil && (w.stale || f.past(w, now))
}

// StaleAmong returns which of the workers are stale now (nil when none is,
// the common case, without allocating).
func (f *Freshness) StaleAmong(workers iter.Seq[string], now time.Time) map[string]bool {
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

// Transition is a change of a worker's state the shell has not announced.
type Transition struct {
	Worker string
	Stale  bool
	Since  time.Time // the last evidence (when it went stale)
}

// Check latches every worker past the bound and returns the transitions
// since the last Check, each once.
func (f *Freshness) Check(now time.Time) []Transition {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Transition
	for id, w := range f.workers {
		f.latch(w, now)
		if w.stale != w.reported {
			w.reported = w.stale
			out = append(out, Transition{Worker: id, Stale: w.stale, Since: w.alive})
		}
	}
	return out
}

// Count is the number of stale workers now.
func (f *Freshness) Count(now time.Time) int {
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
