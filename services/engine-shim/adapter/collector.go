package adapter

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the adapter's counters (Stats) at scrape time. name
// turns a short name into the service's metric name (servicekit's
// Server.MetricName gives switchyard_engine_shim_<what>).
func (b *Backend) Collector(name func(string) string) prometheus.Collector {
	labels := prometheus.Labels{"engine": string(b.cfg.Engine), "worker_id": b.cfg.WorkerID}
	return &collector{
		b:       b,
		batches: prometheus.NewDesc(name("engine_event_batches_total"), "Engine KV event batches applied.", nil, labels),
		events:  prometheus.NewDesc(name("engine_events_total"), "Engine KV events decoded.", nil, labels),
		skipped: prometheus.NewDesc(name("engine_events_skipped_total"), "Engine KV events or messages skipped, by reason.", []string{"reason"}, labels),
		seq:     prometheus.NewDesc(name("engine_event_sequence_total"), "Sequence incidents: gaps, replays, failed replays, resyncs, publisher restarts, duplicates.", []string{"kind"}, labels),
		mapped:  prometheus.NewDesc(name("engine_mapped_blocks"), "Engine blocks in the engine-hash → Switchyard-hash map.", nil, labels),
		scrapes: prometheus.NewDesc(name("engine_metrics_scrapes_total"), "Scrapes of the engine's /metrics, by result.", []string{"result"}, labels),
		dropped: prometheus.NewDesc(name("retention_dropped_total"), "Requests whose retention (the scheduler's or a hint's) the engine cannot take (a vLLM release).", nil, labels),
	}
}

type collector struct {
	b                                                       *Backend
	batches, events, skipped, seq, mapped, scrapes, dropped *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.batches, c.events, c.skipped, c.seq, c.mapped, c.scrapes, c.dropped} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.Stats()
	counter := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	counter(c.batches, s.Batches)
	counter(c.events, s.Events)
	for reason, v := range map[string]uint64{
		"malformed": s.MalformedEvents, "unknown": s.UnknownEvents, "bad_batch": s.BadBatches, "bad_frame": s.BadFrames,
		"orphan": s.Mapper.Orphans, "unknown_removal": s.Mapper.UnknownRemovals, "filtered_group": s.Mapper.Filtered,
		"multimodal": s.Mapper.Opaque, "block_size": s.Mapper.SizeMismatch, "unknown_announcement": s.Mapper.UnknownAnnouncements,
	} {
		counter(c.skipped, v, reason)
	}
	for kind, v := range map[string]uint64{
		"gap": s.Gaps, "replay": s.Replays, "replay_failure": s.ReplayFailures, "resync": s.Resyncs,
		"publisher_restart": s.PublisherRestarts, "duplicate": s.Duplicates, "reconnect": s.Reconnects,
	} {
		counter(c.seq, v, kind)
	}
	ch <- prometheus.MustNewConstMetric(c.mapped, prometheus.GaugeValue, float64(s.MappedBlocks))
	counter(c.scrapes, s.Scrapes-s.ScrapeErrs, "ok")
	counter(c.scrapes, s.ScrapeErrs, "error")
	counter(c.dropped, s.RetentionDropped)
}
