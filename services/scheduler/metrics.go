package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/pkg/admission"
)

// metrics wrap the cores from outside: the cores report what happened, the
// shell counts it.
type metrics struct {
	routes           *prometheus.CounterVec // policy, worker, reason
	routeSeconds     prometheus.Histogram   // decision time, admission wait excluded
	admissionWait    prometheus.Histogram   // time a turn waited for admission
	waitingTurns     prometheus.Gauge       // turns blocked in Route now
	shed             prometheus.Counter     // new sessions turned away
	findMatchesFails prometheus.Counter     // indexer unreachable or slow
	chainBases       *prometheus.CounterVec // hop (route, find_matches), outcome (held, not_held)
	predecessorWaits *prometheus.CounterVec // outcome: a turn waited for its session's previous turn's finish
	heldAnswers      *prometheus.CounterVec // --held-from-index: answers by result
	workers          prometheus.Gauge       // registered workers
	leaseExpiries    prometheus.Counter     // workers dropped for a lapsed lease
	healthFailures   prometheus.Counter     // workers dropped for a failed health check
	utilization      *prometheus.GaugeVec   // worker: KV utilization (admission)
	countUtil        *prometheus.GaugeVec   // worker: REASONING / max programs
	inflight         *prometheus.GaugeVec   // worker: routed requests not finished
	programs         *prometheus.GaugeVec   // lifecycle, phase
	programEvents    *prometheus.CounterVec // reason: paused, resumed, forced_resume, marked, expired, released...
	timePaused       prometheus.Histogram   // length of each pause
	ticks            *prometheus.CounterVec // changed: true/false
	tickSeconds      prometheus.Histogram   // tick duration
	watchersDropped  *prometheus.CounterVec // stream: watch subscribers too slow to keep
	prefillMarks     *prometheus.CounterVec // known: first-token reports
	replicas         prometheus.Gauge       // scheduler replicas deciding on the fleet, as heard
	peerFailures     prometheus.Counter     // a peer's admission-use stream broke or could not open
	indexerReady     *prometheus.GaugeVec   // indexer: 1 while caught up and asked
}

func newMetrics(reg prometheus.Registerer, name func(string) string) *metrics {
	waitBuckets := []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800}
	m := &metrics{
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("routes_total"),
			Help: "Routing decisions by policy, chosen worker and reason."}, []string{"policy", "worker", "reason"}),
		routeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("route_decision_seconds"),
			Help:    "Time to decide a route (indexer call and scoring), admission wait excluded.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10)}),
		admissionWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("admission_wait_seconds"),
			Help: "Time turns waited in Route for their program to be admitted, or until they gave up (deadline, client gone, shutdown).", Buckets: waitBuckets}),
		waitingTurns: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("waiting_turns"),
			Help: "Turns blocked in Route by admission control."}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{Name: name("shed_sessions_total"),
			Help: "New sessions' turns turned away (ResourceExhausted) because the paused working sets exceed what the fleet can absorb."}),
		heldAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("held_answers_total"),
			Help: "What the flash indexers said idle programs hold (--held-from-index), by result: taken, dropped (the index could not tell: a stale or unknown worker, a chain that does not match the prompt, a prompt it never knew; or the program moved on meanwhile) or failed (no indexer answered)."}, []string{"result"}),
		findMatchesFails: prometheus.NewCounter(prometheus.CounterOpts{Name: name("find_matches_failures_total"),
			Help: "FindMatches calls that failed or timed out (the route used no overlap)."}),
		chainBases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("chain_bases_total"),
			Help: "Hash chains that named a base: Routes received (hop route: held, or not_held and answered NOT_FOUND for the sender to resend whole) and FindMatches sent on (hop find_matches: held, or not_held and sent again whole)."}, []string{"hop", "outcome"}),
		predecessorWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("predecessor_waits_total"),
			Help: "Routes that waited for the FinishRequest of an unfinished turn of their session whose prompt they extend, by outcome: finished (it came), gave_up (not within 100 ms, or the caller left)."}, []string{"outcome"}),
		workers: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("workers"), Help: "Registered workers."}),
		leaseExpiries: prometheus.NewCounter(prometheus.CounterOpts{Name: name("lease_expirations_total"),
			Help: "Workers removed because their lease lapsed."}),
		healthFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: name("worker_health_failures_total"),
			Help: "Workers removed because their shim failed a health check (until they register again)."}),
		utilization: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("worker_utilization"),
			Help: "KV utilization of each worker as admission control counts it."}, []string{"worker"}),
		countUtil: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("worker_count_utilization"),
			Help: "REASONING programs over max running requests, per worker."}, []string{"worker"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("worker_inflight_requests"),
			Help: "Requests routed to each worker and not finished."}, []string{"worker"}),
		programs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("programs"),
			Help: "Programs by lifecycle and phase."}, []string{"lifecycle", "phase"}),
		programEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("program_events_total"),
			Help: "Program lifecycle changes by reason (paused, resumed, forced_resume, marked, expired, released, ...)."}, []string{"reason"}),
		timePaused: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("time_paused_seconds"),
			Help: "Length of each pause, observed when it ends.", Buckets: waitBuckets}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("admission_ticks_total"),
			Help: "Admission ticks, by whether they changed anything."}, []string{"changed"}),
		tickSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("admission_tick_seconds"),
			Help: "Duration of an admission tick.", Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10)}),
		watchersDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("watchers_dropped_total"),
			Help: "Watch streams (programs, route_decisions) ended because the client could not keep up."}, []string{"stream"}),
		prefillMarks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("prefill_complete_total"),
			Help: "MarkPrefillComplete calls, by whether the request was still in flight."}, []string{"known"}),
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("replicas"),
			Help: "Scheduler replicas sharing the fleet's admission, this one included, as last heard (1 without peers)."}),
		peerFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: name("peer_failures_total"),
			Help: "Times another replica's admission-use stream broke or could not be opened."}),
		indexerReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("flash_indexer_ready"),
			Help: "1 while a flash indexer is caught up and asked FindMatches, 0 while it is not."}, []string{"indexer"}),
	}
	m.replicas.Set(1)
	reg.MustRegister(m.routes, m.routeSeconds, m.admissionWait, m.waitingTurns, m.shed, m.findMatchesFails, m.chainBases, m.predecessorWaits, m.heldAnswers, m.workers,
		m.leaseExpiries, m.healthFailures, m.utilization, m.countUtil, m.inflight, m.programs, m.programEvents, m.timePaused,
		m.ticks, m.tickSeconds, m.watchersDropped, m.prefillMarks, m.replicas, m.peerFailures, m.indexerReady)
	return m
}

// events counts program changes.
func (m *metrics) events(evs []admission.Event) {
	for _, e := range evs {
		m.programEvents.WithLabelValues(e.Reason).Inc()
		if e.PausedFor > 0 {
			m.timePaused.Observe(e.PausedFor.Seconds())
		}
	}
}

// forgetWorker drops a departed worker's series.
func (m *metrics) forgetWorker(id string) {
	m.utilization.DeleteLabelValues(id)
	m.countUtil.DeleteLabelValues(id)
	m.inflight.DeleteLabelValues(id)
	m.routes.DeletePartialMatch(prometheus.Labels{"worker": id})
}
