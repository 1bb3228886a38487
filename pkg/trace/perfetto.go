package trace

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// traceEvent is one Chrome Trace Event (the JSON ui.perfetto.dev opens).
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// maxDurationMs bounds a record's durations (about 30 years).
const maxDurationMs = 1e12

// PerfettoOptions tune the export.
type PerfettoOptions struct {
	NoStages bool // omit the prefill-wait / prefill / decode stage slices
	NoTools  bool // omit the tool gaps between turns
}

// Drawn reports whether WritePerfetto draws r: a request's end or a tool's.
func Drawn(r Record) bool { return drawnRequest(&r) || drawnTool(&r) }

func drawnRequest(r *Record) bool { return r.EventType == EventRequestEnd && r.Request != nil }

func drawnTool(r *Record) bool {
	return r.Tool != nil && (r.EventType == EventToolEnd || r.EventType == EventToolError)
}

// WritePerfetto writes records as Chrome Trace Event JSON: one process per
// top-level session, one thread per session or sub-agent (a further lane
// when its requests overlap), each request a slice with prefill-wait,
// prefill and decode stage slices under it, and the tool gap between two
// turns of a lane as a slice of its own. Records are ordered by receipt
// time, not line order.
func WritePerfetto(w io.Writer, recs []Record, o PerfettoOptions) error {
	type req struct {
		rec     *Record
		start   float64 // ms
		total   float64
		session string
		parent  string
	}
	var reqs []req
	var toolRecs []*Record
	for i := range recs {
		r := &recs[i]
		switch {
		case drawnRequest(r):
			q := r.Request
			total := 0.0
			if q.TotalTimeMs != nil {
				// Clamped as ReadDynamo clamps it: a garbage 1e308 would
				// turn into an infinite µs timestamp, which JSON cannot
				// carry, and fail the whole export.
				total = min(max(*q.TotalTimeMs, 0), maxDurationMs)
			}
			start := float64(r.EventTimeUnixMs) - total
			if q.RequestReceivedMs != nil {
				start = float64(*q.RequestReceivedMs)
			}
			rq := req{rec: r, start: start, total: total, session: q.RequestID}
			if s, p := r.AgentContext.Sessions(); s != "" {
				rq.session, rq.parent = s, p
			}
			reqs = append(reqs, rq)
		case drawnTool(r):
			toolRecs = append(toolRecs, r)
		}
	}
	slices.SortStableFunc(reqs, func(a, b req) int { return cmp.Compare(a.start, b.start) })
	base := 0.0
	if len(reqs) > 0 {
		base = reqs[0].start
	}
	for _, t := range toolRecs {
		if t.Tool.StartedAtUnixMs != nil && (len(reqs) == 0 || float64(*t.Tool.StartedAtUnixMs) < base) {
			base = float64(*t.Tool.StartedAtUnixMs)
		}
	}
	us := func(ms float64) float64 { return (ms - base) * 1000 }
	dur := func(ms float64) *float64 { v := max(ms, 0) * 1000; return &v }

	// Processes: the root of each session's parent chain.
	parentOf := map[string]string{}
	for _, r := range reqs {
		if r.parent != "" && r.parent != r.session {
			parentOf[r.session] = r.parent
		}
	}
	root := func(s string) string {
		for n := 0; n < 64; n++ {
			p, ok := parentOf[s]
			if !ok {
				break
			}
			s = p
		}
		return s
	}
	var out []traceEvent
	pids := map[string]int{}
	type laneKey struct {
		session string
		lane    int
	}
	tids := map[laneKey]int{}
	lanesOf := map[string]*sessionLanes{}
	nextTid := map[int]int{}
	pidOf := func(s string) int {
		rs := root(s)
		p, ok := pids[rs]
		if !ok {
			p = len(pids) + 1
			pids[rs] = p
			out = append(out, traceEvent{Name: "process_name", Ph: "M", Pid: p, Args: map[string]any{"name": "session: " + rs}})
		}
		return p
	}
	tidOf := func(pid int, s string, lane int) int {
		k := laneKey{s, lane}
		t, ok := tids[k]
		if !ok {
			nextTid[pid]++
			t = nextTid[pid]
			tids[k] = t
			name := s
			if s != root(s) {
				name = "sub-agent " + s
			}
			if lane > 0 {
				name += fmt.Sprintf(" [lane %d]", lane)
			}
			out = append(out, traceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: t, Args: map[string]any{"name": name}})
			out = append(out, traceEvent{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: t, Args: map[string]any{"sort_index": t}})
		}
		return t
	}
	for _, r := range reqs {
		q := r.rec.Request
		pid := pidOf(r.session)
		lanes := lanesOf[r.session]
		if lanes == nil {
			lanes = newSessionLanes()
			lanesOf[r.session] = lanes
		}
		lane, gapFrom := lanes.place(r.start, r.start+r.total)
		tid := tidOf(pid, r.session, lane)
		if !o.NoTools && gapFrom > 0 && r.start > gapFrom {
			out = append(out, traceEvent{Name: "tool", Cat: "tool", Ph: "X", Ts: us(gapFrom), Dur: dur(r.start - gapFrom), Pid: pid, Tid: tid})
		}
		model := q.Model
		if model == "" {
			model = "model"
		}
		args := map[string]any{"request_id": q.RequestID}
		putU := func(k string, v *uint64) {
			if v != nil {
				args[k] = *v
			}
		}
		putF := func(k string, v *float64) {
			if v != nil {
				args[k] = *v
			}
		}
		putU("input_tokens", q.InputTokens)
		putU("output_tokens", q.OutputTokens)
		putU("cached_tokens", q.CachedTokens)
		putF("ttft_ms", q.TTFTMs)
		putF("avg_itl_ms", q.AvgITLMs)
		putF("kv_hit_rate", q.KVHitRate)
		if q.Worker != nil {
			if q.Worker.WorkerName != "" {
				args["worker"] = q.Worker.WorkerName
			} else if q.Worker.DecodeWorkerID != nil {
				args["worker"] = *q.Worker.DecodeWorkerID
			}
		}
		if fm := q.FinishReasonMetadata; fm != nil {
			args["finish.finish_reason"] = fm.FinishReason
			args["finish.tool_call_count"] = len(fm.ToolCalls)
			var names []string
			for _, tc := range fm.ToolCalls {
				if tc.Name != "" {
					names = append(names, tc.Name)
				}
			}
			if len(names) > 0 {
				args["finish.tool_call_names"] = strings.Join(names, ",")
			}
		}
		out = append(out, traceEvent{Name: "LLM request: " + model, Cat: "dynamo.llm", Ph: "X", Ts: us(r.start), Dur: dur(r.total), Pid: pid, Tid: tid, Args: args})
		if o.NoStages || q.TTFTMs == nil {
			continue
		}
		ttft := min(max(*q.TTFTMs, 0), r.total)
		wait := 0.0
		if q.PrefillWaitTimeMs != nil {
			wait = min(max(*q.PrefillWaitTimeMs, 0), ttft)
		}
		if wait > 0 {
			out = append(out, traceEvent{Name: "prefill wait", Cat: "dynamo.llm.stage", Ph: "X", Ts: us(r.start), Dur: dur(wait), Pid: pid, Tid: tid})
		}
		out = append(out, traceEvent{Name: "prefill", Cat: "dynamo.llm.stage", Ph: "X", Ts: us(r.start + wait), Dur: dur(ttft - wait), Pid: pid, Tid: tid})
		if r.total > ttft {
			out = append(out, traceEvent{Name: "decode", Cat: "dynamo.llm.stage", Ph: "X", Ts: us(r.start + ttft), Dur: dur(r.total - ttft), Pid: pid, Tid: tid})
		}
		out = append(out, traceEvent{Name: "first token", Cat: "dynamo.llm", Ph: "i", S: "t", Ts: us(r.start + ttft), Pid: pid, Tid: tid})
	}
	if !o.NoTools {
		for _, t := range toolRecs {
			te := t.Tool
			s, _ := t.AgentContext.Sessions()
			var start, d float64
			switch {
			case te.StartedAtUnixMs != nil && te.EndedAtUnixMs != nil:
				start, d = float64(*te.StartedAtUnixMs), float64(*te.EndedAtUnixMs)-float64(*te.StartedAtUnixMs)
			case te.DurationMs != nil:
				d = min(*te.DurationMs, maxDurationMs)
				start = float64(t.EventTimeUnixMs) - d
			default:
				continue
			}
			pid := pidOf(s)
			tid := tidOf(pid, s+" tools", 0)
			name := te.ToolClass
			if name == "" {
				name = "tool"
			}
			out = append(out, traceEvent{Name: name, Cat: "tool", Ph: "X", Ts: us(start), Dur: dur(d), Pid: pid, Tid: tid,
				Args: map[string]any{"status": te.Status, "tool_call_id": te.ToolCallID}})
		}
	}
	doc := struct {
		DisplayTimeUnit string       `json:"displayTimeUnit"`
		TraceEvents     []traceEvent `json:"traceEvents"`
	}{"ms", out}
	if doc.TraceEvents == nil {
		doc.TraceEvents = []traceEvent{}
	}
	return json.NewEncoder(w).Encode(&doc)
}

// sessionLanes lays one session's requests out in lanes, in order of
// start: each request goes to the lowest-numbered lane whose last request
// has ended by its start, or to a new lane when every lane is still busy.
// Starts never decrease, so a lane free at one start stays free at every
// later one until it is given a request: busy holds the lanes still
// running, soonest end first, and free those that have ended, lowest
// number first. A request moves a lane or two between the heaps, O(log n),
// where a scan of every lane for the first free one made a session of n
// overlapping requests cost O(n²).
type sessionLanes struct {
	end  []float64 // each lane's last request's end, ms
	busy laneHeap  // by end: a NaN end (never past any start) is last, as +Inf
	free laneHeap  // by lane number
}

func newSessionLanes() *sessionLanes {
	l := &sessionLanes{}
	l.busy.less = func(a, b int) bool { return laneOrder(l.end[a]) < laneOrder(l.end[b]) }
	l.free.less = func(a, b int) bool { return a < b }
	return l
}

// place gives the request over [start, end) its lane, and returns it with
// the end of the lane's previous request (-1 for a new lane). Calls come
// in order of start.
func (l *sessionLanes) place(start, end float64) (lane int, prevEnd float64) {
	for l.busy.Len() > 0 && l.end[l.busy.lanes[0]] <= start {
		heap.Push(&l.free, heap.Pop(&l.busy))
	}
	if l.free.Len() > 0 {
		lane = heap.Pop(&l.free).(int)
		prevEnd = l.end[lane]
		l.end[lane] = end
	} else {
		lane, prevEnd = len(l.end), -1
		l.end = append(l.end, end)
	}
	heap.Push(&l.busy, lane)
	return lane, prevEnd
}

// laneOrder is an end as the busy heap orders it: NaN compares false with
// everything, which would break the heap, and like +Inf it never frees
// its lane.
func laneOrder(end float64) float64 {
	if math.IsNaN(end) {
		return math.Inf(1)
	}
	return end
}

// laneHeap is a heap of lane numbers (container/heap.Interface) in the
// order less gives.
type laneHeap struct {
	lanes []int
	less  func(a, b int) bool
}

func (h *laneHeap) Len() int           { return len(h.lanes) }
func (h *laneHeap) Less(i, j int) bool { return h.less(h.lanes[i], h.lanes[j]) }
func (h *laneHeap) Swap(i, j int)      { h.lanes[i], h.lanes[j] = h.lanes[j], h.lanes[i] }
func (h *laneHeap) Push(x any)         { h.lanes = append(h.lanes, x.(int)) }
func (h *laneHeap) Pop() any {
	n := len(h.lanes) - 1
	x := h.lanes[n]
	h.lanes = h.lanes[:n]
	return x
}
