package routing

import "time"

// Tracked is the load the router itself has put on a worker and not yet seen
// finish. Heartbeats lag by seconds; a burst of routes must see its own
// effect at once or every request of the burst lands on the same worker.
type Tracked struct {
	PrefillTokens int // prompt tokens routed but not yet prefilled
	DecodeBlocks  int // KV blocks held by routed requests until they finish
	Requests      int // routed requests not yet finished
	// FreedBlocks and FreedRequests are the requests freed since the worker
	// last reported its load (LoadTracker.Reported), or since the sample of
	// its last report (LoadTracker.ReportedAt). A report taken while
	// they ran still counts them: without taking them out, a session's next
	// turn, sent as soon as the last one finished, finds its own worker
	// charged for the blocks it is about to reuse (the credit its cache
	// earns) and is routed away. A request is taken out with every block
	// it can have held, its prompt's and those it generated into: a report
	// taken as it decoded counted both.
	FreedBlocks, FreedRequests int
}

type inflight struct {
	worker        string
	prefillTokens int
	promptTokens  int
	blockSize     int
	prefillDone   bool
	sessionID     string
	// heard is when the request was routed or last reported still running
	// (Running): the stale sweep's age counts from it.
	heard time.Time
	// orphaned: its worker left the fleet. Its finish may still come (a
	// draining shim lets its turns end) and must still end the turn; its
	// load went with the worker's.
	orphaned bool
}

// blocks is how many KV blocks the request holds with generated tokens
// after its prompt.
func (r *inflight) blocks(generated int) int {
	return requestBlocks(r.promptTokens+generated, r.blockSize)
}

// LoadTracker keeps the in-flight load per worker, keyed by request id,
// mirroring Dynamo's AddRequest / MarkPrefillCompleted / Free.
type LoadTracker struct {
	// workers holds a worker while it has requests in flight or freed
	// since its last report.
	workers  map[string]*Tracked
	requests map[string]*inflight
	// freed are, per worker, the requests freed since its last report (about
	// in the order freed): a report that may have been sampled before some
	// of them (ReportedAt) still counts those. Tracked's FreedBlocks and
	// FreedRequests are their sums, kept for the cost of every route.
	freed map[string][]freedRequest
}

// freedRequest is one request freed: when, and the blocks and request it
// took out of its worker's Tracked.
type freedRequest struct {
	at     time.Time
	blocks int
}

// maxFreedKept bounds each worker's freed list; a worker that finishes more
// between two reports keeps only its latest (the older half goes), which are
// the ones a report sampled a moment before it arrived may still count.
const maxFreedKept = 4096

// NewLoadTracker returns an empty tracker.
func NewLoadTracker() *LoadTracker {
	return &LoadTracker{workers: map[string]*Tracked{}, requests: map[string]*inflight{}, freed: map[string][]freedRequest{}}
}

// Add records a routed request: prefillTokens until its first token, the
// blocks of its promptTokens until it finishes. Adding an id twice replaces
// the first entry.
func (t *LoadTracker) Add(now time.Time, id, worker, sessionID string, prefillTokens, promptTokens, blockSize int) {
	if _, ok := t.requests[id]; ok {
		t.Free(now, id, 0)
	}
	r := &inflight{worker: worker, prefillTokens: prefillTokens, promptTokens: promptTokens,
		blockSize: blockSize, sessionID: sessionID, heard: now}
	t.requests[id] = r
	w := t.workers[worker]
	if w == nil {
		w = &Tracked{}
		t.workers[worker] = w
	}
	w.PrefillTokens += prefillTokens
	w.DecodeBlocks += r.blocks(0)
	w.Requests++
}

// MarkPrefillDone drops the request's prompt tokens from its worker's
// prefill load (first token seen). It reports whether the request was known.
func (t *LoadTracker) MarkPrefillDone(id string) bool {
	r := t.requests[id]
	if r == nil {
		return false
	}
	if !r.prefillDone {
		r.prefillDone = true
		if w := t.workers[r.worker]; w != nil && !r.orphaned {
			w.PrefillTokens -= r.prefillTokens
		}
	}
	return true
}

// Free removes the request's load, generated tokens after its prompt; it
// returns the worker and session it was on, whether it was orphaned (its
// worker left the fleet, and the session's binding to it with it), and
// false when the id is unknown (already freed, or swept).
func (t *LoadTracker) Free(now time.Time, id string, generated int) (worker, sessionID string, orphaned, ok bool) {
	r := t.requests[id]
	if r == nil {
		return "", "", false, false
	}
	delete(t.requests, id)
	if w := t.workers[r.worker]; w != nil && !r.orphaned {
		if !r.prefillDone {
			w.PrefillTokens -= r.prefillTokens
		}
		w.DecodeBlocks -= r.blocks(0)
		w.Requests--
		blocks := r.blocks(max(generated, 0))
		w.FreedBlocks += blocks
		w.FreedRequests++
		f := t.freed[r.worker]
		if len(f) == maxFreedKept {
			f = f[:copy(f, f[len(f)/2:])] // the older half: once per half a list
		}
		t.freed[r.worker] = append(f, freedRequest{at: now, blocks: blocks})
	}
	return r.worker, r.sessionID, r.orphaned, true
}

// Reported records that worker has just reported its load: the report
// already leaves out every request freed before it.
func (t *LoadTracker) Reported(worker string) { t.reported(worker, time.Time{}, true) }

// ReportedAt records a report of worker's load sampled at sampled (a
// heartbeat arrives after its sample was taken, a real engine's metrics
// scraped before that): the report leaves out the requests freed up to
// sampled, and may still count those freed after, which stay taken out of
// it until a later report.
func (t *LoadTracker) ReportedAt(worker string, sampled time.Time) {
	t.reported(worker, sampled, false)
}

// reported keeps taking out of worker's reports the requests freed after
// sampled (none: all).
func (t *LoadTracker) reported(worker string, sampled time.Time, all bool) {
	// Finishes are recorded in about the order they happened, not exactly
	// (concurrent calls read the clock before the lock): every entry is
	// looked at. The list's array is kept for the next finishes.
	f, kept, blocks := t.freed[worker], 0, 0
	if !all {
		for _, r := range f {
			if r.at.After(sampled) {
				f[kept] = r
				kept++
				blocks += r.blocks
			}
		}
	}
	if f != nil {
		t.freed[worker] = f[:kept]
	}
	w := t.workers[worker]
	if w == nil {
		delete(t.freed, worker)
		return
	}
	w.FreedBlocks, w.FreedRequests = blocks, kept
	if w.Requests == 0 && kept == 0 {
		delete(t.workers, worker)
		delete(t.freed, worker)
	}
}

// Worker returns the tracked load of a worker.
func (t *LoadTracker) Worker(id string) Tracked {
	if w := t.workers[id]; w != nil {
		return *w
	}
	return Tracked{}
}

// RequestWorker returns the worker a live request was routed to.
func (t *LoadTracker) RequestWorker(id string) (string, bool) {
	if r := t.requests[id]; r != nil {
		return r.worker, true
	}
	return "", false
}

// Len is the number of requests in flight.
func (t *LoadTracker) Len() int { return len(t.requests) }

// RemoveWorker forgets a worker's load (it left the fleet) and returns the
// ids of its requests in flight. They stay known, orphaned, until their
// finish or the stale sweep: a turn whose worker went must still end in
// admission, or its program would stay in flight for good.
func (t *LoadTracker) RemoveWorker(worker string) []string {
	var ids []string
	for id, r := range t.requests {
		if r.worker == worker && !r.orphaned {
			ids = append(ids, id)
			r.orphaned = true
		}
	}
	delete(t.workers, worker)
	delete(t.freed, worker)
	return ids
}

// Running records that worker still runs the requests ids at now (its
// heartbeat said so), so that Stale counts their age from now: a turn that
// runs longer than the stale age keeps its load while it runs. Ids not in
// flight here, or here on another worker (an attempt a migration replaced,
// still open on the worker it left), are ignored.
func (t *LoadTracker) Running(now time.Time, worker string, ids []string) {
	for _, id := range ids {
		if r := t.requests[id]; r != nil && r.worker == worker && now.After(r.heard) {
			r.heard = now
		}
	}
}

// Stale returns the requests neither routed nor reported running (Running)
// for maxAge or longer: their FinishRequest was lost, and their load would
// otherwise stay forever.
func (t *LoadTracker) Stale(now time.Time, maxAge time.Duration) []string {
	var ids []string
	for id, r := range t.requests {
		if now.Sub(r.heard) >= maxAge {
			ids = append(ids, id)
		}
	}
	return ids
}
