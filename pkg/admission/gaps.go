package admission

import (
	"container/list"
	"math"
	"time"
)

// GapModel learns online how long programs stay away between turns (a
// tool call, or the user), so that admission control can tell an idle
// session about to return from one that will be away for minutes. Gaps are
// heavy-tailed (Claude Code: p50 11 s, p99 53 min), so it averages their
// logarithms: what it predicts is a typical gap, a geometric mean.
//
// Estimates come from the session's own past gaps once it has a few, else
// from the gaps that followed the same tool, else from every program's.
type GapModel struct {
	global logMean
	// byTool holds the tools' means in a list ordered by when each was
	// last heard of (the front most recently), so that the one heard of
	// longest ago goes first when the bound is reached.
	byTool   map[string]*list.Element // of *toolMean
	tools    list.List
	bySess   map[string]*logMean
	fallback time.Duration
}

// logMean is an exponentially weighted mean of log-seconds.
type logMean struct {
	mean float64
	n    int
}

// toolMean is one tool's mean, in GapModel.tools.
type toolMean struct {
	name string
	logMean
}

// gapAlpha is the weight of the newest gap: about the last ten count.
const gapAlpha = 0.1

// maxTools bounds the tools the model learns: tool names are the
// clients' (FinishRequest.tool_call_names), so one client naming a new
// tool on every turn would otherwise grow it without end. An agent declares
// tens of tools, a large MCP setup hundreds; past the bound the tool heard
// of longest ago is forgotten (in constant time: Observe runs under the
// scheduler's lock), so that a tool in use stays learnt unless 4,096 other
// names come between two of its calls.
const maxTools = 4096

// minOwnGaps is how many gaps of its own a session needs before its own
// mean is trusted over its tool's.
const minOwnGaps = 3

func (m *logMean) add(x float64) {
	if m.n == 0 {
		m.mean = x
	} else {
		a := max(gapAlpha, 1/float64(m.n+1)) // a plain mean until the EWMA's horizon
		m.mean += a * (x - m.mean)
	}
	m.n++
}

// NewGapModel returns a model that predicts fallback until it has seen a
// gap.
func NewGapModel(fallback time.Duration) *GapModel {
	return &GapModel{byTool: map[string]*list.Element{}, bySess: map[string]*logMean{}, fallback: fallback}
}

// Observe records that a program of session came back gap after a turn
// that called tools (none: the user's turn).
func (g *GapModel) Observe(session string, tools []string, gap time.Duration) {
	x := math.Log(max(gap.Seconds(), 1e-3))
	g.global.add(x)
	for _, t := range tools {
		e := g.byTool[t]
		switch {
		case e != nil:
			g.tools.MoveToFront(e)
		case len(g.byTool) >= maxTools:
			// The tool heard of longest ago makes room, its element reused.
			e = g.tools.Back()
			delete(g.byTool, e.Value.(*toolMean).name)
			*e.Value.(*toolMean) = toolMean{name: t}
			g.tools.MoveToFront(e)
			g.byTool[t] = e
		default:
			e = g.tools.PushFront(&toolMean{name: t})
			g.byTool[t] = e
		}
		e.Value.(*toolMean).add(x)
	}
	m := g.bySess[session]
	if m == nil {
		m = &logMean{}
		g.bySess[session] = m
	}
	m.add(x)
}

// Typical is the gap expected after a turn of session that called tools.
func (g *GapModel) Typical(session string, tools []string) time.Duration {
	if m := g.bySess[session]; m != nil && m.n >= minOwnGaps {
		return seconds(m.mean)
	}
	var sum float64
	var n int
	for _, t := range tools {
		if e := g.byTool[t]; e != nil {
			sum += e.Value.(*toolMean).mean
			n++
		}
	}
	switch {
	case n > 0:
		return seconds(sum / float64(n))
	case g.global.n > 0:
		return seconds(g.global.mean)
	}
	return g.fallback
}

// Remaining is how much longer a program away for elapsed is expected to
// stay away: the typical gap less what has passed, but never less than
// what has passed — with heavy tails, the longer a program has been away,
// the longer it is likely to stay (a gap twice the typical one is the
// user's, not the tool's).
func (g *GapModel) Remaining(session string, tools []string, elapsed time.Duration) time.Duration {
	return max(g.Typical(session, tools)-elapsed, elapsed)
}

// Forget drops a session's own history (it ended).
func (g *GapModel) Forget(session string) { delete(g.bySess, session) }

func seconds(logSec float64) time.Duration {
	return time.Duration(math.Exp(logSec) * float64(time.Second))
}
