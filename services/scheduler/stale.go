package scheduler

import (
	"time"

	"switchyard.dev/pkg/admission"
)

// The stale sweep. A routed turn whose FinishRequest never comes (its
// frontend died, or the finish was lost with the call stream carrying it)
// would hold its load and keep its program reasoning for good, so a turn
// not finished after --stale-request-after is ended as if it had finished
// with nothing generated. But a turn can run longer than that (a long
// generation on a slow or busy engine), and ending it frees its load while
// it still runs: admission undercounts its worker. So the sweep ends only
// the stale turns it cannot see still running.
//
// Nothing the scheduler hears names a turn while it runs after its first
// token (MarkPrefillComplete says it started, not that its frontend is
// still there; the shims report counts, not request ids), so the evidence
// is its worker's: each load report counts the requests the engine runs or
// queues, and a turn whose frontend died is not among them (the shim aborts
// a request whose Generate stream ended). A stale turn is kept while its
// worker's report, fresh and taken after the turn was there to be counted,
// counts at least as many requests as this scheduler has in flight there
// that it could count. When one of those ended unseen the report counts
// fewer, and the worker's stale turns, which cannot be told from it, are
// ended. Requests a report counts that are not this scheduler's (another
// replica's) can hide one that ended, so a turn is kept at most
// runningBound stale ages.
//
// The routing core sweeps its in-flight load by age alone
// (routing.Config.StaleRequestAfter), so the scheduler runs its pipeline
// without that sweep (pipelineConfig) and sweeps here; it is the routing
// core's to do, were the core told the reports.

// runningBound is how many stale ages a turn its worker's load still shows
// running is kept at most: an hour at the default five minutes, a long
// generation on a slow or busy engine (32k tokens at 10 tokens/s is under
// an hour).
const runningBound = 12

// reportLag is how long before a load report arrived a turn must have been
// routed for the report to count it while it runs: a shim samples a
// simulated engine as it sends, and scrapes a real one's metrics every
// second (the engine shim's --engine-metrics-interval). A turn routed later
// is not evidence either way.
const reportLag = 2 * time.Second

// inflightTurns are the turns routed here and not finished, and what each
// worker's load reports say, for the stale sweep. Not safe for concurrent
// use: the service holds s.mu.
type inflightTurns struct {
	turns   map[string]inflightTurn // by request id
	reports map[string]workerReport // by worker id

	old    []inflightTurn // scratch of sweep: the stale turns
	counts map[string]int // scratch of sweep: per worker, the turns its report could count
}

type inflightTurn struct {
	id     string
	key    admission.Key
	worker string
	epoch  uint64 // the worker's incarnation it was routed to
	since  time.Time
}

// workerReport is the last new sample of a worker's load: at is when the
// scheduler received it (its clock), observed the sample's own time (the
// shim's clock, compared only with the same shim's), requests what the
// engine ran or queued.
type workerReport struct {
	epoch    uint64
	at       time.Time
	observed time.Time
	requests int
}

func newInflightTurns() *inflightTurns {
	return &inflightTurns{turns: map[string]inflightTurn{}, reports: map[string]workerReport{}, counts: map[string]int{}}
}

// routed records a turn placed on worker (of epoch) at now; a request placed
// again (migrated) replaces its earlier attempt.
func (f *inflightTurns) routed(now time.Time, id string, key admission.Key, worker string, epoch uint64) {
	f.turns[id] = inflightTurn{id: id, key: key, worker: worker, epoch: epoch, since: now}
}

// ended forgets a turn whose finish came (or whose placing again failed).
func (f *inflightTurns) ended(id string) { delete(f.turns, id) }

// registered records a worker's registration at now, with its load: a new
// incarnation (epoch) starts its reports afresh.
func (f *inflightTurns) registered(now time.Time, worker string, epoch uint64, observed time.Time, requests int) {
	f.reports[worker] = workerReport{epoch: epoch, at: now, observed: observed, requests: requests}
}

// reported records a heartbeat's load received at now. A sample no newer
// than the last (a real engine's metrics not scraped again since, a
// heartbeat overtaken by the next) is no news: the report keeps the time
// the sample it holds arrived. A sample without its time is taken as new.
func (f *inflightTurns) reported(now time.Time, worker string, observed time.Time, requests int) {
	r, ok := f.reports[worker]
	if !ok || (!observed.IsZero() && !observed.After(r.observed)) {
		return
	}
	r.at, r.observed, r.requests = now, observed, requests
	f.reports[worker] = r
}

// forget drops a worker's reports (it left): its turns are no longer seen
// running, until it registers again.
func (f *inflightTurns) forget(worker string) { delete(f.reports, worker) }

// staleSweep is what one sweep did: ended are the turns to end (valid until
// the next sweep), unseen how many of them their worker's load did not show
// still running, overdue how many ran past the bound; kept counts the stale
// turns kept as running.
type staleSweep struct {
	ended           []inflightTurn
	unseen, overdue int
	kept            int
}

// sweep forgets and returns the turns routed at least after ago (0: none)
// that their worker's load does not show still running, and those routed
// at least bound ago whatever it shows (bound ≤ after: every stale turn). A
// report older than fresh shows nothing. It costs a look at each turn in
// flight; a second only when some are stale.
func (f *inflightTurns) sweep(now time.Time, after, bound, fresh time.Duration) staleSweep {
	var sw staleSweep
	if after <= 0 {
		return sw
	}
	f.old = f.old[:0]
	for _, t := range f.turns {
		if now.Sub(t.since) >= after {
			f.old = append(f.old, t)
		}
	}
	if len(f.old) == 0 {
		return sw
	}
	clear(f.counts)
	for _, t := range f.old {
		if r, ok := f.reports[t.worker]; ok && r.epoch == t.epoch {
			f.counts[t.worker] = 0
		}
	}
	for _, t := range f.turns {
		if n, ok := f.counts[t.worker]; ok && f.counted(t) {
			f.counts[t.worker] = n + 1
		}
	}
	// f.old's turns are copies: the ended ones are returned in its place.
	ended := f.old[:0]
	for _, t := range f.old {
		switch {
		case now.Sub(t.since) >= bound:
			sw.overdue++
		case f.counted(t) && now.Sub(f.reports[t.worker].at) <= fresh && f.reports[t.worker].requests >= f.counts[t.worker]:
			sw.kept++
			continue
		default:
			sw.unseen++
		}
		delete(f.turns, t.id)
		ended = append(ended, t)
	}
	sw.ended = ended
	return sw
}

// counted reports whether t's worker's report counts it if it runs: the
// same incarnation, and t routed long enough before the report arrived.
func (f *inflightTurns) counted(t inflightTurn) bool {
	r, ok := f.reports[t.worker]
	return ok && r.epoch == t.epoch && !t.since.After(r.at.Add(-reportLag))
}
