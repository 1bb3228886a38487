package servicekit

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics registers every collector on reg; the first that fails (a
// name taken twice) is the error.
func RegisterMetrics(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// StatsMetrics makes the gauges and counters a service reads from its core's
// stats at each scrape: Stats takes a snapshot, and each metric reports what
// its function makes of one. Name is the server's MetricName.
type StatsMetrics[S any] struct {
	Name  func(what string) string
	Stats func() S
}

// Gauge is the gauge what (named with Name) reading f of a snapshot.
func (m StatsMetrics[S]) Gauge(what, help string, f func(S) float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: m.Name(what), Help: help}, func() float64 { return f(m.Stats()) })
}

// Counter is the counter what (named with Name) reading f of a snapshot: a
// total the core keeps.
func (m StatsMetrics[S]) Counter(what, help string, f func(S) float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.Name(what), Help: help}, func() float64 { return f(m.Stats()) })
}
