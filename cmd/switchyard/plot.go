package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"strings"

	"switchyard.dev/pkg/replay"
)

// plotSVG draws two panels side by side, turns per minute and prefix hit
// rate against concurrency (log2 axis), one line per policy with error bars
// from the seeds' min and max; the oracle is dashed, and the hit-rate panel
// shows the ideal (an infinite cache on the same turns) dotted. Standard
// library only.
func plotSVG(title string, rows []replay.Row) []byte {
	const (
		pw, ph        = 460.0, 300.0 // panel plot area
		ml, mt, gap   = 70.0, 50.0, 110.0
		width, height = ml + 2*pw + gap + 30, mt + ph + 110
	)
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}
	var pols []string
	byPol := map[string][]replay.Row{}
	var levels []int
	seenLevel := map[int]bool{}
	maxT := 0.0
	for _, r := range rows {
		if _, ok := byPol[r.Policy]; !ok {
			pols = append(pols, r.Policy)
		}
		byPol[r.Policy] = append(byPol[r.Policy], r)
		if !seenLevel[r.Concurrency] {
			seenLevel[r.Concurrency] = true
			levels = append(levels, r.Concurrency)
		}
		maxT = max(maxT, r.TurnsPerMinMax)
	}
	minC, maxC := math.MaxInt, 0
	for _, c := range levels {
		minC, maxC = min(minC, c), max(maxC, c)
	}
	maxT = niceCeil(max(maxT, 1))
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
	type series struct {
		val, lo, hi func(replay.Row) float64
	}
	panel := func(x0 float64, label string, yMin, yMax float64, yFmt func(float64) string, s series, ideal bool) {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", x0, mt, pw, ph)
		yOf := func(v float64) float64 { return mt + ph - (min(max(v, yMin), yMax)-yMin)/(yMax-yMin)*ph }
		for i := 0; i <= 5; i++ {
			v := yMin + (yMax-yMin)*float64(i)/5
			y := yOf(v)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+pw, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, yFmt(v))
		}
		for _, c := range levels {
			x := xOf(c, x0)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, mt, x, mt+ph)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, mt+ph+16, c)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">concurrency (sessions active at once)</text>`+"\n", x0+pw/2, mt+ph+34)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+pw/2, mt-8, xmlEscape(label))
		if ideal {
			// One ideal per level: every policy's turns are drawn from the
			// same sessions; take the first row's.
			var pts []string
			for _, c := range levels {
				for _, r := range rows {
					if r.Concurrency == c {
						pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(c, x0), yOf(r.IdealHitRate)))
						break
					}
				}
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#777" stroke-width="1.5" stroke-dasharray="2,3"/>`+"\n", strings.Join(pts, " "))
		}
		for i, p := range pols {
			c := colors[i%len(colors)]
			var pts []string
			// Spread the policies a little sideways so error bars do not
			// hide each other.
			shift := (float64(i) - float64(len(pols)-1)/2) * 3
			for _, r := range byPol[p] {
				x := xOf(r.Concurrency, x0) + shift
				y := yOf(s.val(r))
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				if lo, hi := yOf(s.lo(r)), yOf(s.hi(r)); hi < lo {
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", x, lo, x, hi, c)
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x-3, lo, x+3, lo, c)
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x-3, hi, x+3, hi, c)
				}
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x, y, c)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), c, dash(p))
		}
	}
	panel(ml, "completed turns per minute (mean, seed min–max)", 0, maxT, humanNum, series{
		val: func(r replay.Row) float64 { return r.TurnsPerMin },
		lo:  func(r replay.Row) float64 { return r.TurnsPerMinMin },
		hi:  func(r replay.Row) float64 { return r.TurnsPerMinMax },
	}, false)
	panel(ml+pw+gap, "prefix-cache hit rate (dotted: ideal)", 0, 1, func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }, series{
		val: func(r replay.Row) float64 { return r.PrefixHitRate },
		lo:  func(r replay.Row) float64 { return r.PrefixHitRateMin },
		hi:  func(r replay.Row) float64 { return r.PrefixHitRateMax },
	}, true)
	for i, p := range pols {
		x := ml + float64(i%6)*150
		y := mt + ph + 62 + float64(i/6)*20
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`, x, y, x+24, y, colors[i%len(colors)], dash(p))
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
	}
	return fmt.Sprintf("%.0f", v)
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
