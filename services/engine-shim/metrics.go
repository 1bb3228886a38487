package engineshim

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit"
)

// metricsCollector reads the simulated engine's counters at scrape time, so
// the core carries no metrics code (a real engine's are the adapter's
// Collector). vLLM's names come first (existing dashboards
// query them; Prometheus counters carry the _total suffix as vLLM exposes
// them), then Switchyard's own.
type metricsCollector struct {
	d *driver

	running, waiting, usage, hits, queries, preemptions *prometheus.Desc
	tierBlocks, evictions, reprefill, prompt, generated *prometheus.Desc
	steps, batches                                      *prometheus.Desc
}

func registerMetrics(srv *servicekit.Server, cfg Config, d *driver) error {
	labels := prometheus.Labels{"model_name": cfg.Model, "worker_id": cfg.WorkerID}
	vllm := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("vllm:"+name, help, nil, labels)
	}
	own := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc(srv.MetricName(name), help, vars, labels)
	}
	c := &metricsCollector{
		d:           d,
		running:     vllm("num_requests_running", "Requests in the running batch."),
		waiting:     vllm("num_requests_waiting", "Requests waiting to be scheduled."),
		usage:       vllm("kv_cache_usage_perc", "Fraction of device KV blocks held by requests (1 = full)."),
		hits:        vllm("prefix_cache_hits_total", "Prompt tokens served from the prefix cache."),
		queries:     vllm("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache."),
		preemptions: vllm("num_preemptions_total", "Requests preempted (blocks taken back, re-prefilled later)."),
		tierBlocks:  own("kv_blocks", "KV blocks per tier and state (total, used, resident).", "tier", "state"),
		evictions:   own("kv_evictions_total", "Blocks dropped from each tier.", "tier"),
		reprefill:   own("reprefilled_tokens_total", "Tokens computed again after a preemption."),
		prompt:      own("prompt_tokens_computed_total", "Prompt tokens computed (prefill work)."),
		generated:   own("generated_tokens_total", "Output tokens generated."),
		steps:       own("engine_steps_total", "Engine scheduler iterations."),
		batches:     own("kv_event_batches_total", "KV event batches published (the last sequence)."),
	}
	if err := srv.Registry().Register(c); err != nil {
		return err
	}
	if p := d.pool; p != nil {
		for _, m := range []struct {
			name, help string
			v          *atomic.Uint64
		}{
			{"pool_read_failures_total", "Shared pool reads that failed or timed out (served as misses).", &p.readFailures},
			{"pool_write_failures_total", "Shared pool write batches that failed.", &p.writeFailures},
			{"pool_dropped_writes_total", "Blocks never written to the shared pool (queue full or write failed).", &p.dropped},
		} {
			v := m.v
			f := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: srv.MetricName(m.name), Help: m.help, ConstLabels: labels},
				func() float64 { return float64(v.Load()) })
			if err := srv.Registry().Register(f); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.usage, c.hits, c.queries, c.preemptions,
		c.tierBlocks, c.evictions, c.reprefill, c.prompt, c.generated, c.steps, c.batches} {
		ch <- d
	}
}

func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	d.mu.Lock()
	st := d.eng.Stats()
	steps, last := d.steps, d.log.last()
	d.mu.Unlock()

	gauge := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
	}
	counter := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, lv...)
	}
	gauge(c.running, float64(st.Running))
	gauge(c.waiting, float64(st.Waiting))
	gauge(c.usage, st.KVUsage)
	counter(c.hits, float64(st.PrefixHitTokens))
	counter(c.queries, float64(st.PrefixQueryTokens))
	counter(c.preemptions, float64(st.Preemptions))
	for t := range kv.NumTiers {
		ts := st.Tiers[t]
		if ts.Total == 0 {
			continue
		}
		name := kv.Tier(t).String()
		gauge(c.tierBlocks, float64(ts.Total), name, "total")
		gauge(c.tierBlocks, float64(ts.Used), name, "used")
		gauge(c.tierBlocks, float64(ts.Resident), name, "resident")
		counter(c.evictions, float64(st.Evictions[t]), name)
	}
	counter(c.reprefill, float64(st.RePrefilledTokens))
	counter(c.prompt, float64(st.PromptTokens))
	counter(c.generated, float64(st.GeneratedTokens))
	counter(c.steps, float64(steps))
	counter(c.batches, float64(last))
}
