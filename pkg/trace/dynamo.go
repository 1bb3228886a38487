package trace

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// ReadRecords decodes a JSONL stream of records, each line either an
// Envelope (file sinks) or a bare record (stderr), skipping blank lines.
// What a writer killed mid-record leaves is no error: a line whose JSON
// stops short (the last, or one a restarted writer appended after on a
// line of its own: trace.Opener), or a gzip member that breaks off at the
// end; the records around it are whole, and cut says what was dropped, for
// the caller to warn of. Any other line that is not a record is an error,
// and so is a gzip stream that breaks in the middle (a MemberError). name
// is the file's, which each record's Origin carries with its line.
func ReadRecords(r io.Reader, name string) (recs []Record, cut Cut, err error) {
	sc := newLineScanner(r)
	bad := func(line int, err error) ([]Record, Cut, error) {
		// A gzip member torn in the middle decodes the next member's
		// bytes as its own, handing on garbage before the decoder notices:
		// then the member is what broke, not the line. Only the member
		// being decoded can be torn so: one the line ends before (the
		// scanner reads ahead) ended whole, its checksum right.
		if g, ok := r.(*gzipReader); ok && sc.end > g.memberOut {
			if me := g.finishMember(finishBudget); me != nil {
				err = me
			}
		}
		return nil, Cut{}, fmt.Errorf("line %d: %w", line, err)
	}
	for line, b := range nonBlank(sc) {
		var probe struct {
			Event  json.RawMessage `json:"event"`
			Schema string          `json:"schema"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			if stopsShort(b) {
				if cut.Lines == 0 {
					cut.FirstLine = line
				}
				cut.Lines, cut.Bytes = cut.Lines+1, cut.Bytes+len(b)
				continue
			}
			return bad(line, err)
		}
		var rec Record
		src := b
		if probe.Schema == "" && len(probe.Event) > 0 && probe.Event[0] == '{' {
			src = probe.Event
		}
		if err := json.Unmarshal(src, &rec); err != nil {
			return bad(line, err)
		}
		rec.Origin = Origin{File: name, Line: line}
		recs = append(recs, rec)
	}
	if cut.Torn = sc.torn(); !cut.Torn {
		if err := sc.Err(); err != nil {
			return nil, Cut{}, err
		}
	}
	return recs, cut, nil
}

// ReadDynamo decodes one stream of request traces (ours or Dynamo's,
// dynamo.request.trace.v1) into a workload (DynamoWorkload); what a killed
// writer cut off is a warning. A recording of several files (rolled, or
// one per process) is one workload of all their records: the shell reads
// each with ReadRecords and joins them (servicekit/tracefile.Load). Its
// hashes are content hashes, namespaced by no file.
func ReadDynamo(r io.Reader, name string) (*Workload, error) {
	recs, cut, err := ReadRecords(r, name)
	if err != nil {
		return nil, fmt.Errorf("trace: dynamo %s: %w", name, err)
	}
	w, err := DynamoWorkload(recs, name)
	if err != nil {
		return nil, err
	}
	if cut.Any() {
		w.Warnings = append(w.Warnings, name+": "+cut.String())
	}
	return w, nil
}

// DynamoWorkload is the workload of request-trace records: request_end
// records with a replay block, grouped into sessions by
// agent_context.session_id (records without one are single-turn sessions),
// ordered by receipt time. The gap before a turn is the time from the
// previous turn's completion to its receipt; a session whose
// parent_session_id names another session is its sub-agent, attached to
// the parent's first turn received after it began, unless the link would
// close a cycle of parents (then it is dropped). Sequence hashes are
// content hashes already, so they are not namespaced; name labels errors,
// and an error about a record says where it was read (its Origin): its
// line, and its file where the records are of several.
func DynamoWorkload(recs []Record, name string) (*Workload, error) {
	type row struct {
		rec      *Record
		received uint64
	}
	var rows []row
	bs := 0
	var first *Record // the record bs is first of
	for i := range recs {
		rec := &recs[i]
		q := rec.Request
		if rec.EventType != EventRequestEnd || q == nil || q.Replay == nil || q.Replay.TraceBlockSize <= 0 {
			continue
		}
		if q.Replay.TraceBlockSize > maxTokens {
			return nil, fmt.Errorf("trace: dynamo %s: %srequest %q: trace_block_size %d", name, at(rec, name), q.RequestID, q.Replay.TraceBlockSize)
		}
		if bs == 0 {
			bs, first = q.Replay.TraceBlockSize, rec
		} else if bs != q.Replay.TraceBlockSize {
			return nil, fmt.Errorf("trace: dynamo %s: block sizes %d and %d mixed: %srequest %q and %srequest %q",
				name, bs, q.Replay.TraceBlockSize, at(first, name), first.Request.RequestID, at(rec, name), q.RequestID)
		}
		recv := rec.EventTimeUnixMs
		if q.RequestReceivedMs != nil {
			recv = *q.RequestReceivedMs
		} else if q.TotalTimeMs != nil {
			recv -= min(recv, uint64(max(*q.TotalTimeMs, 0)))
		}
		rows = append(rows, row{rec, recv})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("trace: dynamo %s: no request_end records with a replay block", name)
	}
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(a.received, b.received) })
	t0 := rows[0].received
	w := &Workload{Name: name, BlockSize: bs}
	bySession := make(map[string]int)
	type timing struct{ received, done []uint64 }
	var times []timing
	parentOf := make(map[int]string)
	for _, rw := range rows {
		q := rw.rec.Request
		rp := q.Replay
		in := rp.InputLength
		if in <= 0 {
			in = len(rp.InputSequenceHashes) * bs
		}
		if in <= 0 || in > maxTokens || len(rp.InputSequenceHashes) > 0 && (len(rp.InputSequenceHashes)-1)*bs >= in {
			return nil, fmt.Errorf("trace: dynamo %s: %srequest %q: %d hashes of %d tokens for %d input tokens",
				name, at(rw.rec, name), q.RequestID, len(rp.InputSequenceHashes), bs, in)
		}
		out := 0
		if q.OutputTokens != nil {
			out = int(min(*q.OutputTokens, maxTokens))
		}
		sid, parent := rw.rec.AgentContext.Sessions()
		idx, ok := -1, false
		if sid != "" {
			idx, ok = bySession[sid]
		}
		if !ok {
			id := sid
			if id == "" {
				id = q.RequestID
			}
			idx = len(w.Sessions)
			// millis clamps, as the other importers clamp their times: a
			// garbage receipt time far past the others would overflow a
			// Duration into a negative start.
			ss := &Session{ID: id, Parent: -1, Start: millis(float64(rw.received - t0))}
			if sid != "" {
				// Sessions scoped sid by the tenant; a request id is no
				// tenant's.
				ss.Tenant = rw.rec.AgentContext.Tenant
			}
			w.Sessions = append(w.Sessions, ss)
			times = append(times, timing{})
			if sid != "" {
				bySession[sid] = idx
			}
			if parent != "" && parent != sid {
				parentOf[idx] = parent
			}
		}
		s := w.Sessions[idx]
		tm := &times[idx]
		done := rw.received
		if q.TotalTimeMs != nil && *q.TotalTimeMs > 0 {
			done += uint64(min(*q.TotalTimeMs, maxDurationMs))
		}
		var gap time.Duration
		if n := len(tm.done); n > 0 && rw.received > tm.done[n-1] {
			gap = millis(float64(rw.received - tm.done[n-1]))
		}
		tm.received = append(tm.received, rw.received)
		tm.done = append(tm.done, done)
		t := Turn{Blocks: slices.Clone(rp.InputSequenceHashes), InputLen: in, OutputLen: out, Gap: gap, Model: q.Model}
		if fm := q.FinishReasonMetadata; fm != nil {
			t.ToolCall = fm.FinishReason == "tool_calls" || len(fm.ToolCalls) > 0
		}
		s.Turns = append(s.Turns, t)
	}
	// Parent links are what clients sent in headers: one that would close
	// a cycle of parents (a session naming as its parent itself, or one of
	// its sub-agents at any depth) is dropped, and its session left
	// top-level, since the sessions of a cycle could never start. Links
	// are taken in order of the sessions' first receipt, so the link
	// dropped is the same on every read, and no cycle is left for
	// parentCycle to refuse.
	for child, pid := range sortedKeys(parentOf) {
		p, ok := bySession[pid]
		if !ok || w.descends(p, child) {
			continue
		}
		w.Sessions[child].Parent = p
		start := times[child].received[0]
		pt := times[p].received
		j, _ := slices.BinarySearch(pt, start)
		if j < len(pt) {
			w.Sessions[p].Turns[j].Children = append(w.Sessions[p].Turns[j].Children, child)
		} else {
			w.Sessions[p].Tail = append(w.Sessions[p].Tail, child)
		}
	}
	return w, nil
}

// at is where rec was read (Origin.label), as an error's prefix.
func at(rec *Record, name string) string {
	if l := rec.Origin.label(name); l != "" {
		return l + ": "
	}
	return ""
}

// descends says whether session s is session anc or one of its sub-agents
// at any depth: s's chain of parents, which has no cycle, reaches anc.
func (w *Workload) descends(s, anc int) bool {
	for ; s >= 0; s = w.Sessions[s].Parent {
		if s == anc {
			return true
		}
	}
	return false
}

// sortedKeys iterates a map in key order (determinism).
func sortedKeys(m map[int]string) func(yield func(int, string) bool) {
	return func(yield func(int, string) bool) {
		keys := make([]int, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}
