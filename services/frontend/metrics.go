package frontend

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/services/servicekit/tracefile"
)

type logger = *slog.Logger

type metrics struct {
	requests   *prometheus.CounterVec
	ttft       *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	preprocess prometheus.Histogram
	shed       *prometheus.CounterVec
	migrations *prometheus.CounterVec
	rejected   *prometheus.CounterVec
	bases      *prometheus.CounterVec
	chainBases *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, name func(string) string) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("requests_total"), Help: "HTTP API requests by API and status code.",
		}, []string{"api", "status"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name("ttft_seconds"), Help: "Time from request arrival to the first generated token.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"api"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("tokens_total"), Help: "Tokens by kind: prompt, completion, cached (prompt tokens served from KV cache).",
		}, []string{"kind"}),
		preprocess: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: name("preprocess_seconds"), Help: "Template rendering, tokenization and block hashing of one prompt.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("shed_requests_total"), Help: "Requests answered 429 because the scheduler shed them (fleet over capacity), by API.",
		}, []string{"api"}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("migrations_total"), Help: "Turns moved to another worker because theirs failed, by how it failed (dial, unavailable, internal, aborted, deadline_exceeded, stalled, unresponsive).",
		}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("rejected_requests_total"), Help: "Requests refused with Retry-After because a bound was reached, by API and bound: 503 for inflight (--max-inflight-requests), route_timeout (--route-timeout), scheduler_unavailable (--route-retry-budget); 429 for tenant_rate (--tenant-rps), tenant_streams (--tenant-streams). Sheds are shed_requests_total.",
		}, []string{"api", "reason"}),
		bases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("prompt_bases_total"), Help: "Turns sent to their worker as only what follows the session's previous prompt, which the worker's shim kept (sent), and those it no longer held and that were sent again whole (not_held).",
		}, []string{"outcome"}),
		chainBases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("chain_bases_total"), Help: "Routes sent on the session's previous chain (only the block hashes that follow it) to the scheduler replica that kept it, by outcome: held (answered on it), not_held (it no longer held it: sent again whole).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.requests, m.ttft, m.tokens, m.preprocess, m.shed, m.migrations, m.rejected, m.bases, m.chainBases)
	return m
}

// registerTraceMetrics exports the request-trace writer's counters, when
// tracing is on: a trace file that cannot be written loses records without
// failing a request.
func registerTraceMetrics(reg prometheus.Registerer, name func(string) string, a *tracefile.Async) {
	counter := func(opts prometheus.CounterOpts, n func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(opts, func() float64 { return float64(n()) })
	}
	const dropped = "Request-trace records not written, by reason: queue_full (the writer fell behind), write_failed (dropped with a failed write or flush of the trace sink: the records it held since its last flush)."
	reg.MustRegister(
		counter(prometheus.CounterOpts{Name: name("trace_write_errors_total"),
			Help: "Failed writes and flushes of the request-trace sink (--trace-file, SWITCHYARD_REQUEST_TRACE*); the first of a run of them is logged at WARN."}, a.Errors),
		counter(prometheus.CounterOpts{Name: name("trace_records_dropped_total"), Help: dropped,
			ConstLabels: prometheus.Labels{"reason": "queue_full"}}, a.Dropped),
		counter(prometheus.CounterOpts{Name: name("trace_records_dropped_total"), Help: dropped,
			ConstLabels: prometheus.Labels{"reason": "write_failed"}}, a.Lost),
	)
}
