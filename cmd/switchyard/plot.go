package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"

	"switchyard.dev/pkg/replay"
)

// plotColors are the policies' colours, in the order the rows first name
// them (the HTML report's table uses the same).
var plotColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// plotPanel is one panel of a figure: a y axis and, per policy, a line of
// the rows' means with error bars from the seeds' min and max.
type plotPanel struct {
	label      string
	yMin, yMax float64 // yMax 0: a round number above every max (at least 1)
	yFmt       func(float64) string
	stat       func(replay.Row) (mean, lo, hi float64)
	// ideal, when set, is drawn dotted: one value per concurrency level
	// (every policy's turns are drawn from the same sessions), where some
	// row has one.
	ideal func(replay.Row) float64
}

// spreadPanel is a panel of a metric on an axis from 0 to a round number.
func spreadPanel(label string, stat func(replay.Row) (mean, lo, hi float64)) plotPanel {
	return plotPanel{label: label + " (mean, seed min–max)", yFmt: humanNum, stat: stat}
}

var (
	turnsPanel = spreadPanel("completed turns per minute", func(r replay.Row) (float64, float64, float64) {
		return r.TurnsPerMin, r.TurnsPerMinMin, r.TurnsPerMinMax
	})
	hitRatePanel = plotPanel{label: "prefix-cache hit rate (dotted: ideal)", yMax: 1, yFmt: func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) },
		stat: func(r replay.Row) (float64, float64, float64) {
			return r.PrefixHitRate, r.PrefixHitRateMin, r.PrefixHitRateMax
		},
		ideal: func(r replay.Row) float64 { return r.IdealHitRate },
	}
	throughputPanel = spreadPanel("prompt + output tokens/s", func(r replay.Row) (float64, float64, float64) {
		return r.ThroughputTokensPerS, r.ThroughputTokensPerSMin, r.ThroughputTokensPerSMax
	})
	ttftP50Panel = spreadPanel("TTFT p50, ms", func(r replay.Row) (float64, float64, float64) {
		return r.TTFTP50Ms, r.TTFTP50MsMin, r.TTFTP50MsMax
	})
	ttftP99Panel = spreadPanel("TTFT p99, ms", func(r replay.Row) (float64, float64, float64) {
		return r.TTFTP99Ms, r.TTFTP99MsMin, r.TTFTP99MsMax
	})
)

// plotSVG draws two panels side by side, turns per minute and prefix hit
// rate against concurrency (log2 axis), one line per policy with error bars
// from the seeds' min and max; the oracle is dashed, and the hit-rate panel
// shows the ideal (an infinite cache on the same turns) dotted. Standard
// library only.
func plotSVG(title string, rows []replay.Row) []byte {
	return plotFigure(title, rows, turnsPanel, hitRatePanel)
}

// plotPolicies are the rows' policies in the order they first appear, and
// each one's rows.
func plotPolicies(rows []replay.Row) ([]string, map[string][]replay.Row) {
	var pols []string
	byPol := map[string][]replay.Row{}
	for _, r := range rows {
		if _, ok := byPol[r.Policy]; !ok {
			pols = append(pols, r.Policy)
		}
		byPol[r.Policy] = append(byPol[r.Policy], r)
	}
	return pols, byPol
}

// plotFigure draws the panels side by side against concurrency (log2
// axis), one line per policy, with a legend of the policies below.
func plotFigure(title string, rows []replay.Row, panels ...plotPanel) []byte {
	const (
		pw, ph      = 460.0, 300.0 // panel plot area
		ml, mt, gap = 70.0, 50.0, 110.0
	)
	pols, byPol := plotPolicies(rows)
	n := float64(len(panels))
	width := ml + n*pw + (n-1)*gap + 30
	cols := min(6, max(1, int((width-ml)/150)))
	legendRows := (len(pols) + cols - 1) / cols
	height := mt + ph + 110 + float64(max(0, legendRows-2))*20
	var levels []int
	seenLevel := map[int]bool{}
	for _, r := range rows {
		if !seenLevel[r.Concurrency] {
			seenLevel[r.Concurrency] = true
			levels = append(levels, r.Concurrency)
		}
	}
	minC, maxC := math.MaxInt, 0
	for _, c := range levels {
		minC, maxC = min(minC, c), max(maxC, c)
	}
	xOf := func(c int, x0 float64) float64 {
		if maxC == minC {
			return x0 + pw/2
		}
		return x0 + (math.Log2(float64(c))-math.Log2(float64(minC)))/(math.Log2(float64(maxC))-math.Log2(float64(minC)))*pw
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="14" text-anchor="middle">%s</text>`+"\n", width/2, xmlEscape(title))
	dash := func(p string) string {
		if p == string(replay.PolicyOracle) {
			return ` stroke-dasharray="7,4"`
		}
		return ""
	}
	panel := func(x0 float64, s plotPanel) {
		yMin, yMax := s.yMin, s.yMax
		if yMax == 0 {
			yMax = 1
			for _, r := range rows {
				_, _, hi := s.stat(r)
				yMax = max(yMax, hi)
			}
			yMax = niceCeil(yMax)
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", x0, mt, pw, ph)
		yOf := func(v float64) float64 { return mt + ph - (min(max(v, yMin), yMax)-yMin)/(yMax-yMin)*ph }
		for i := 0; i <= 5; i++ {
			v := yMin + (yMax-yMin)*float64(i)/5
			y := yOf(v)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+pw, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, s.yFmt(v))
		}
		for _, c := range levels {
			x := xOf(c, x0)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, mt, x, mt+ph)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, mt+ph+16, c)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">concurrency (sessions active at once)</text>`+"\n", x0+pw/2, mt+ph+34)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+pw/2, mt-8, xmlEscape(s.label))
		if s.ideal != nil && anyPositive(rows, s.ideal) {
			var pts []string
			for _, c := range levels {
				for _, r := range rows {
					if r.Concurrency == c {
						pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(c, x0), yOf(s.ideal(r))))
						break
					}
				}
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#777" stroke-width="1.5" stroke-dasharray="2,3"/>`+"\n", strings.Join(pts, " "))
		}
		for i, p := range pols {
			c := plotColors[i%len(plotColors)]
			var pts []string
			// Spread the policies a little sideways so error bars do not
			// hide each other.
			shift := (float64(i) - float64(len(pols)-1)/2) * 3
			for _, r := range byPol[p] {
				v, lo, hi := s.stat(r)
				x := xOf(r.Concurrency, x0) + shift
				y := yOf(v)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				if lo, hi := yOf(lo), yOf(hi); hi < lo {
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", x, lo, x, hi, c)
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x-3, lo, x+3, lo, c)
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x-3, hi, x+3, hi, c)
				}
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x, y, c)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), c, dash(p))
		}
	}
	for i, p := range panels {
		panel(ml+float64(i)*(pw+gap), p)
	}
	for i, p := range pols {
		x := ml + float64(i%cols)*150
		y := mt + ph + 62 + float64(i/cols)*20
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`, x, y, x+24, y, plotColors[i%len(plotColors)], dash(p))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+30, y+4, xmlEscape(p))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func humanNum(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v < 10 && v != math.Trunc(v): // an axis of small numbers: 0.3, not 0
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
	return fmt.Sprintf("%.0f", v)
}

// anyPositive reports whether f is above 0 for some row (whether the rows
// have an ideal, a p99, to draw).
func anyPositive(rows []replay.Row, f func(replay.Row) float64) bool {
	for _, r := range rows {
		if f(r) > 0 {
			return true
		}
	}
	return false
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
