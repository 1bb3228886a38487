package servicekit

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStatsMetricsReadEachScrape(t *testing.T) {
	type stats struct{ held, total int }
	cur := stats{held: 2, total: 5}
	m := StatsMetrics[stats]{Name: func(w string) string { return "x_" + w }, Stats: func() stats { return cur }}
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg,
		m.Gauge("held", "Held now.", func(s stats) float64 { return float64(s.held) }),
		m.Counter("total", "Ever.", func(s stats) float64 { return float64(s.total) }),
	); err != nil {
		t.Fatal(err)
	}
	cur = stats{held: 1, total: 7}
	want := "# HELP x_held Held now.\n# TYPE x_held gauge\nx_held 1\n# HELP x_total Ever.\n# TYPE x_total counter\nx_total 7\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if err := RegisterMetrics(reg, m.Gauge("held", "Again.", func(stats) float64 { return 0 })); err == nil {
		t.Fatal("a name registered twice was accepted")
	}
}
