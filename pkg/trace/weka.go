package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"
)

// wekaFile is one kv-cache-tester session file (shared/data/weka-kv-cache-tester).
type wekaFile struct {
	ID          string        `json:"id"`
	BlockSize   int           `json:"block_size"`
	HashIDScope string        `json:"hash_id_scope"`
	Requests    []wekaRequest `json:"requests"`
}

type wekaRequest struct {
	T         float64       `json:"t"`
	Type      string        `json:"type"`
	Model     string        `json:"model"`
	In        int           `json:"in"`
	Out       int           `json:"out"`
	HashIDs   idList        `json:"hash_ids"`
	Stop      string        `json:"stop"`
	ThinkTime float64       `json:"think_time"`
	AgentID   string        `json:"agent_id"`
	Requests  []wekaRequest `json:"requests"`
}

// maxWekaDepth bounds sub-agent nesting (the corpus has one level).
const maxWekaDepth = 8

// ReadWeka decodes one Weka session file. file numbers the file within the
// workload: Weka hash ids are local to their file ("hash_id_scope":
// "local", every file starts at 1), so they are namespaced by it. The
// session's sub-agents become child sessions; a parent turn that follows
// sub-agent markers waits for those sub-agents, and think_time becomes the
// gap before each turn.
func ReadWeka(r io.Reader, file int, name string) (*Workload, error) {
	var f wekaFile
	dec := json.NewDecoder(r)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("trace: weka %s: %w", name, err)
	}
	// A file is one session: anything after it (sessions concatenated into
	// one file) would otherwise be dropped without a word.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trace: weka %s: data after the session (one session per file)", name)
	}
	if f.BlockSize <= 0 || f.BlockSize > maxTokens {
		return nil, fmt.Errorf("trace: weka %s: block_size %d", name, f.BlockSize)
	}
	if f.ID == "" {
		f.ID = name
	}
	w := &Workload{Name: f.ID, BlockSize: f.BlockSize}
	if _, err := w.wekaSession(&f, f.ID, -1, f.Requests, file, 0); err != nil {
		return nil, fmt.Errorf("trace: weka %s: %w", name, err)
	}
	return w, nil
}

func (w *Workload) wekaSession(f *wekaFile, id string, parent int, reqs []wekaRequest, file, depth int) (int, error) {
	if depth > maxWekaDepth {
		return 0, fmt.Errorf("sub-agents nested deeper than %d", maxWekaDepth)
	}
	idx := len(w.Sessions)
	s := &Session{ID: id, Parent: parent}
	w.Sessions = append(w.Sessions, s)
	var pending []int // sub-agents spawned since the last turn
	for i := range reqs {
		q := &reqs[i]
		if q.Type == "subagent" {
			cid := q.AgentID
			if cid == "" {
				cid = fmt.Sprintf("agent_%d", i)
			}
			c, err := w.wekaSession(f, id+"/"+cid, idx, q.Requests, file, depth+1)
			if err != nil {
				return 0, err
			}
			if depth == 0 && len(s.Turns) == 0 {
				// Spawned before the first turn: offset it like a timed start.
				w.Sessions[c].Start = seconds(q.T)
			}
			pending = append(pending, c)
			continue
		}
		if q.In <= 0 || q.Out < 0 || q.In > maxTokens || q.Out > maxTokens {
			return 0, fmt.Errorf("request %d: in %d out %d", i, q.In, q.Out)
		}
		if len(q.HashIDs)*f.BlockSize > q.In {
			return 0, fmt.Errorf("request %d: %d hash ids of %d tokens for %d input tokens", i, len(q.HashIDs), f.BlockSize, q.In)
		}
		blocks := make([]uint64, len(q.HashIDs))
		for k, h := range q.HashIDs {
			blocks[k] = namespace(file, h)
		}
		t := Turn{Blocks: blocks, InputLen: q.In, OutputLen: q.Out, Gap: seconds(q.ThinkTime),
			Model: q.Model, ToolCall: q.Stop == "tool_use", Children: pending}
		pending = nil
		if len(s.Turns) == 0 {
			t.Gap = 0
			if depth == 0 {
				s.Start = seconds(q.T)
			}
		}
		s.Turns = append(s.Turns, t)
	}
	// Sub-agents after the last turn still run; the session ends after them.
	s.Tail = pending
	return idx, nil
}

// seconds converts a trace's float seconds, clamping garbage to [0, 1 year].
func seconds(s float64) time.Duration {
	if !(s > 0) { // also NaN
		return 0
	}
	return time.Duration(math.Min(s, 365*24*3600) * float64(time.Second))
}

// idList decodes a JSON array of non-negative integers without reflection
// per element: hash id arrays are nearly all of a Weka file's bytes.
type idList []uint64

func (l *idList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*l = nil
		return nil
	}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return fmt.Errorf("hash_ids: not an array")
	}
	out := make([]uint64, 0, bytes.Count(b, []byte{','})+1)
	var v uint64
	digits := false
	for _, c := range b[1:] {
		switch {
		case c >= '0' && c <= '9':
			if v > (math.MaxUint64-9)/10 {
				return fmt.Errorf("hash_ids: id too large")
			}
			v, digits = v*10+uint64(c-'0'), true
		case c == ',' || c == ']':
			if !digits {
				if c == ']' && len(out) == 0 {
					break
				}
				return fmt.Errorf("hash_ids: empty element")
			}
			out = append(out, v)
			v, digits = 0, false
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			// The decoder has validated the array: blanks only separate.
		default:
			return fmt.Errorf("hash_ids: want non-negative integers")
		}
	}
	*l = out
	return nil
}
