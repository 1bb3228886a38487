package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"slices"
	"strconv"
	"strings"

	"switchyard.dev/pkg/replay"
)

// htmlPage is what `replay --html` writes: one page that needs nothing
// else (inline CSS, inline SVG, no script, no fetch). The markup is also
// well-formed XML, so a test can read it strictly.
var htmlPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.3em; }
h2 { font-size: 1.15em; margin-top: 1.6em; }
dl.params { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1.2em; }
dl.params dt { font-weight: bold; }
dl.params dd { margin: 0; }
pre { background: #f5f5f5; padding: 0.5em; overflow-x: auto; white-space: pre-wrap; }
.figs { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; padding: 0.3em 0.6em; color: #555; max-width: 1100px; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
span.rng { color: #777; }
span.sw { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.4em; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<dl class="params">
{{- range .Params}}
<dt>{{.Name}}</dt><dd>{{.Value}}</dd>
{{- end}}
</dl>
{{- if .Command}}
<pre>{{.Command}}</pre>
{{- end}}
<p>Each point is the mean over the seeds; bars and the bracketed figures are the seeds' min and max.
The oracle (dashed) is kv with unbounded device KV, an upper bound. TTFT counts the turns still waiting
when the window closed with their wait so far (a lower bound).</p>
<h2>Plots</h2>
<div class="figs">
{{- range .Figures}}
<figure id="{{.ID}}">
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{- end}}
</div>
<h2>Rows</h2>
<table>
<thead><tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr><td><span class="sw" style="{{.Swatch}}"></span>{{.Policy}}</td>{{range .Cells}}<td class="num">{{.Value}}{{if .Range}} <span class="rng">{{.Range}}</span>{{end}}</td>{{end}}</tr>
{{- end}}
</tbody>
</table>
</body>
</html>
`))

type htmlParam struct{ Name, Value string }

type htmlFigure struct {
	ID, Caption string
	SVG         template.HTML // drawn by plotFigure, its text escaped there
}

type htmlCell struct{ Value, Range string }

type htmlRow struct {
	Policy string
	Swatch template.CSS
	Cells  []htmlCell
}

// htmlColumns head the table; htmlCells fills a row in the same order.
var htmlColumns = []string{"policy", "concurrency", "seeds", "turns/min", "tok/s (prompt + output)", "hit rate", "ideal",
	"TTFT p50 ms", "TTFT p99 ms", "open turns"}

// htmlCells are a row's figures as the table shows them: the mean and,
// where the row has them, the seeds' [min, max]; the formats are the
// terminal table's.
func htmlCells(r replay.Row) []htmlCell {
	spread := func(format string, v, lo, hi float64) htmlCell {
		return htmlCell{fmt.Sprintf(format, v), fmt.Sprintf("["+format+", "+format+"]", lo, hi)}
	}
	return []htmlCell{
		{Value: strconv.Itoa(r.Concurrency)},
		{Value: strconv.Itoa(r.Seeds)},
		spread("%.1f", r.TurnsPerMin, r.TurnsPerMinMin, r.TurnsPerMinMax),
		spread("%.0f", r.ThroughputTokensPerS, r.ThroughputTokensPerSMin, r.ThroughputTokensPerSMax),
		spread("%.3f", r.PrefixHitRate, r.PrefixHitRateMin, r.PrefixHitRateMax),
		{Value: fmt.Sprintf("%.3f", r.IdealHitRate)},
		spread("%.0f", r.TTFTP50Ms, r.TTFTP50MsMin, r.TTFTP50MsMax),
		spread("%.0f", r.TTFTP99Ms, r.TTFTP99MsMin, r.TTFTP99MsMax),
		{Value: fmt.Sprintf("%.0f", r.OpenTurns)},
	}
}

// htmlReport renders the page of a run: its parameters, the four plots
// against concurrency and the table of its rows.
func htmlReport(rf runFile) ([]byte, error) {
	rows := rf.Rows
	pols, _ := plotPolicies(rows)
	var levels []int
	for _, r := range rows {
		if !slices.Contains(levels, r.Concurrency) {
			levels = append(levels, r.Concurrency)
		}
	}
	slices.Sort(levels)
	var lv []string
	for _, c := range levels {
		lv = append(lv, strconv.Itoa(c))
	}
	// The config as JSON has it, so that a run and its --merge read the same.
	var cfg map[string]any
	if b, err := json.Marshal(rf.Config); err != nil {
		return nil, err
	} else if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, err
	}
	title := "Replay of " + rf.Trace
	if rf.Trace == "" {
		title = "Replay"
	}
	params := []htmlParam{{"trace", rf.Trace}}
	params = append(params, htmlConfigParams(cfg)...)
	params = append(params,
		htmlParam{"policies", strings.Join(pols, ", ")},
		htmlParam{"concurrency", strings.Join(lv, ", ")},
		htmlParam{"rows", strconv.Itoa(len(rows))})

	ttft := []plotPanel{ttftP50Panel}
	if anyPositive(rows, func(r replay.Row) float64 { return r.TTFTP99Ms }) { // a p99 to draw
		ttft = append(ttft, ttftP99Panel)
	}
	hitCaption := "Prefix-cache hit rate: cached prompt tokens over prompt tokens of the turns completed in the window."
	if anyPositive(rows, hitRatePanel.ideal) {
		hitCaption += " Dotted: the ideal, one infinite cache on the same turns."
	}
	figs := []htmlFigure{
		{"turns", "Completed turns per minute vs concurrency (sessions active at once), per policy.",
			template.HTML(plotFigure("Turns per minute", rows, turnsPanel))},
		{"throughput", "Throughput: prompt plus output tokens of the turns completed in the window, per second.",
			template.HTML(plotFigure("Throughput", rows, throughputPanel))},
		{"hit-rate", hitCaption, template.HTML(plotFigure("Prefix-cache hit rate", rows, hitRatePanel))},
		{"ttft", "Time to first token, median and 99th percentile of each run, in milliseconds.",
			template.HTML(plotFigure("Time to first token", rows, ttft...))},
	}
	var trs []htmlRow
	for _, r := range rows {
		c := plotColors[slices.Index(pols, r.Policy)%len(plotColors)]
		trs = append(trs, htmlRow{Policy: r.Policy, Swatch: template.CSS("background: " + c), Cells: htmlCells(r)})
	}
	var buf bytes.Buffer
	err := htmlPage.Execute(&buf, map[string]any{
		"Title": title, "Params": params, "Command": strings.TrimSpace(rf.Command),
		"Figures": figs, "Columns": htmlColumns, "Rows": trs,
	})
	return buf.Bytes(), err
}

// htmlConfigParams are the cluster's and the experiment's settings that a
// reader of the plots needs, those the run recorded.
func htmlConfigParams(cfg map[string]any) []htmlParam {
	str := func(k string) (string, bool) {
		switch v := cfg[k].(type) {
		case nil:
			return "", false
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64), true
		default:
			return fmt.Sprint(v), true
		}
	}
	var ps []htmlParam
	add := func(name, format string, keys ...string) {
		var vs []any
		for _, k := range keys {
			v, ok := str(k)
			if !ok {
				return
			}
			vs = append(vs, v)
		}
		ps = append(ps, htmlParam{name, fmt.Sprintf(format, vs...)})
	}
	add("cluster", "%s workers × %s", "workers", "perf")
	add("KV per worker", "%s tokens (%s blocks of %s)", "kv_capacity_tokens_per_worker", "gpu_blocks", "block_size")
	for _, k := range []string{"host_blocks", "disk_blocks", "pool_blocks"} {
		if v, _ := str(k); v != "" && v != "0" {
			add(strings.ReplaceAll(k, "_", " "), "%s", k)
		}
	}
	add("split", "%s", "split")
	add("seeds", "%s (first %s)", "seeds", "first_seed")
	add("warmup", "%s s", "warmup_s")
	add("window", "%s s", "window_s")
	add("max gap", "%s s", "max_gap_s")
	add("kv_cap session cap", "%s per worker", "session_cap")
	if h, ok := cfg["hints"]; ok {
		on := "off"
		if h != nil {
			on = "on"
		}
		ps = append(ps, htmlParam{"hints", on})
	}
	add("scheduler replicas", "%s (sync delay %s s)", "scheduler_replicas", "sync_delay_s")
	add("session end", "%s", "session_end")
	return ps
}

func writeHTML(path string, rf runFile) error {
	b, err := htmlReport(rf)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
