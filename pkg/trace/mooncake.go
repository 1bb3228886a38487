package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// DefaultMooncakeBlockSize is the tokens per hash id of the public Mooncake
// traces and AIPerf's default.
const DefaultMooncakeBlockSize = 512

// mooncakeRow is one line of a Mooncake (or agentic Mooncake) trace.
type mooncakeRow struct {
	SessionID    string   `json:"session_id"`
	RequestID    string   `json:"request_id"`
	Timestamp    *float64 `json:"timestamp"`
	CreatedTime  *float64 `json:"created_time"`
	InputLength  int      `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
	Delay        float64  `json:"delay"`
	DelayMs      float64  `json:"delay_ms"`
	WaitFor      []string `json:"wait_for"`
	ToolWaitMs   float64  `json:"tool_wait_ms"`
}

// ReadMooncake decodes a Mooncake trace: one request per line with
// input_length, output_length and prefix hash_ids of blockSize tokens
// (0 = 512). Rows sharing a session_id form a closed-loop session whose
// later turns wait delay (or delay_ms) after the previous one; rows without
// one are single-turn sessions arriving at their timestamp. With agentic
// set, rows also carry request_id, wait_for and tool_wait_ms: the gap before
// a turn is delay + tool_wait_ms, and a session whose first row waits for a
// request of another session is that session's sub-agent (the parent's next
// turn waits for it); a request_id that two rows share is refused where a
// wait_for names it, since the wait could mean either. file namespaces the
// hash ids.
func ReadMooncake(r io.Reader, file int, name string, blockSize int, agentic bool) (*Workload, error) {
	if blockSize <= 0 {
		blockSize = DefaultMooncakeBlockSize
	}
	w := &Workload{Name: name, BlockSize: blockSize}
	bySession := make(map[string]int)
	type loc struct{ session, turn, line int }
	byRequest := make(map[string]loc)
	dups := make(map[string][2]int) // request ids on more than one line: the first and the latest
	type dep struct {
		child int
		on    []string
	}
	var deps []dep

	sc := newLineScanner(r)
	for line, b := range nonBlank(sc) {
		var row mooncakeRow
		if err := json.Unmarshal(b, &row); err != nil {
			return nil, fmt.Errorf("trace: mooncake %s:%d: %w", name, line, err)
		}
		if row.OutputLength == nil || *row.OutputLength < 0 || *row.OutputLength > maxTokens {
			return nil, fmt.Errorf("trace: mooncake %s:%d: output_length missing, negative or past %d", name, line, maxTokens)
		}
		in := row.InputLength
		if in == 0 {
			in = len(row.HashIDs) * blockSize
		}
		if in <= 0 || (len(row.HashIDs)-1)*blockSize >= in && len(row.HashIDs) > 0 || in > maxTokens {
			return nil, fmt.Errorf("trace: mooncake %s:%d: %d hash ids of %d tokens for %d input tokens", name, line, len(row.HashIDs), blockSize, in)
		}
		ts := row.Timestamp
		if ts == nil {
			ts = row.CreatedTime
		}
		blocks := make([]uint64, len(row.HashIDs))
		for k, h := range row.HashIDs {
			blocks[k] = namespace(file, h)
		}
		gap := millis(row.DelayMs)
		if row.Delay > 0 {
			gap = millis(row.Delay)
		}
		if agentic {
			gap += millis(row.ToolWaitMs)
		}
		t := Turn{Blocks: blocks, InputLen: in, OutputLen: *row.OutputLength, Gap: gap}

		idx, ok := -1, false
		if row.SessionID != "" {
			idx, ok = bySession[row.SessionID]
		}
		if !ok {
			id := row.SessionID
			if id == "" {
				id = fmt.Sprintf("%s#%d", name, line)
			}
			idx = len(w.Sessions)
			s := &Session{ID: id, Parent: -1}
			if ts != nil {
				s.Start = millis(*ts)
			}
			w.Sessions = append(w.Sessions, s)
			if row.SessionID != "" {
				bySession[row.SessionID] = idx
			}
			if agentic && len(row.WaitFor) > 0 {
				deps = append(deps, dep{child: idx, on: row.WaitFor})
			}
			t.Gap = 0
		}
		s := w.Sessions[idx]
		if agentic && row.RequestID != "" {
			if prev, dup := byRequest[row.RequestID]; dup {
				dups[row.RequestID] = [2]int{prev.line, line} // a wait on it is refused below
			} else {
				byRequest[row.RequestID] = loc{idx, len(s.Turns), line}
			}
		}
		s.Turns = append(s.Turns, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: mooncake %s: %w", name, err)
	}
	if len(w.Sessions) == 0 {
		// As the other importers refuse theirs: an empty (or blank) file is
		// more likely a failed export than a workload of nothing.
		return nil, fmt.Errorf("trace: mooncake %s: no requests", name)
	}
	// A session that starts by waiting on another session's request is its
	// sub-agent: it starts when that request completes, and the parent's
	// next turn waits for it. A wait on the session's own request, or on
	// its own sub-agent's, is not a spawn: the next one is tried. A longer
	// cycle of waits is the trace's error.
	for _, d := range deps {
		for _, rid := range d.on {
			// A wait_for names a request by its id: of two rows with one
			// id, which one a wait means is anyone's guess. Ids that no
			// wait names are no one's concern.
			if lines, dup := dups[rid]; dup {
				return nil, fmt.Errorf("trace: mooncake %s:%d: request_id %q, which a wait_for names, already on line %d", name, lines[1], rid, lines[0])
			}
			p, ok := byRequest[rid]
			if !ok || p.session == d.child || w.Sessions[p.session].Parent == d.child {
				continue
			}
			w.Sessions[d.child].Parent = p.session
			ps := w.Sessions[p.session]
			if next := p.turn + 1; next < len(ps.Turns) {
				ps.Turns[next].Children = append(ps.Turns[next].Children, d.child)
			} else {
				ps.Tail = append(ps.Tail, d.child)
			}
			break
		}
	}
	if err := w.parentCycle(); err != nil {
		return nil, fmt.Errorf("trace: mooncake %s: %w", name, err)
	}
	return w, nil
}

func millis(ms float64) time.Duration {
	return seconds(ms / 1000)
}
