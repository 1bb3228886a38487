package trace

import (
	"fmt"
	"time"
)

// Format names a trace file format an importer understands.
type Format string

const (
	FormatDynamo          Format = "dynamo"           // dynamo.request.trace.v1 JSONL (ours or Dynamo's), plain or gzip
	FormatMooncake        Format = "mooncake"         // {timestamp, input_length, output_length, hash_ids[, session_id, delay]}
	FormatAgenticMooncake Format = "agentic-mooncake" // + request_id, wait_for, delay, tool_wait_ms
	FormatWeka            Format = "weka"             // kv-cache-tester Claude Code sessions, one JSON per session
)

// Formats lists every importable format.
var Formats = []Format{FormatDynamo, FormatMooncake, FormatAgenticMooncake, FormatWeka}

// Describe names what a trace of the format holds, for titles.
func (f Format) Describe() string {
	switch f {
	case FormatDynamo:
		return "Dynamo request trace"
	case FormatMooncake:
		return "Mooncake trace"
	case FormatAgenticMooncake:
		return "agentic Mooncake trace"
	case FormatWeka:
		return "Weka Claude Code sessions"
	}
	return string(f)
}

// ParseFormat maps a flag value to a Format.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "agentic_mooncake":
		return FormatAgenticMooncake, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("trace: unknown format %q (want dynamo, mooncake, agentic-mooncake or weka)", s)
}

// Workload is what every importer produces: sessions of turns, each turn the
// prompt a client sent (as trace block ids) and the answer length it got.
// Block ids are already namespaced: equal ids mean equal prefixes across the
// whole workload, never by accident across files.
type Workload struct {
	Name      string
	BlockSize int // tokens per block id (Weka 64, Mooncake 512, Dynamo: the trace's)
	Sessions  []*Session
	// Warnings say what a reader passed over without refusing the file (a
	// recorded trace's last line cut off mid-record), for the caller to
	// show: what is replayed is less than the file.
	Warnings []string
}

// Session is one agent session (or one sub-agent of one).
type Session struct {
	ID string
	// Tenant is the tenant whose session ids ID is one of (a recorded
	// trace's named tenant; empty otherwise): ID is then Tenant + "/" +
	// the id the client sent, so that two tenants' sessions stay apart,
	// and a name built from a session and its sub-agent carries the
	// tenant once.
	Tenant string
	// Parent is the index in Workload.Sessions of the session that spawned
	// this one; -1 for a top-level session.
	Parent int
	// Start is the session's arrival time relative to the workload start
	// (timed replay); closed-loop replay ignores it for top-level sessions.
	Start time.Duration
	Turns []Turn
	// Tail are sub-agents spawned after the last turn: the session is over
	// only when they are.
	Tail []int
}

// Turn is one request of a session.
type Turn struct {
	// Blocks are the prompt's block ids, one per trace block, root first.
	// Equal leading ids are equal prefixes. The last one may cover a partial
	// block (Mooncake); tokens past len(Blocks)*BlockSize are unique to
	// this turn.
	Blocks    []uint64
	InputLen  int
	OutputLen int
	// Gap is the client-side time before this turn is sent, counted from the
	// completion of the session's previous turn: the tool call (and user)
	// time. For a session's first turn it is the delay after the session
	// starts.
	Gap time.Duration
	// Children are sessions (indices into Workload.Sessions) that start
	// when the previous turn completes (sub-agents spawned by its tool
	// call); this turn waits until they have all finished.
	Children []int
	Model    string
	// ToolCall says the turn ended with a tool call (stop reason tool_use).
	ToolCall bool
}

// Stats summarises a workload.
type Stats struct {
	Sessions, TopLevel, Turns int
	InputTokens, OutputTokens int64
}

// Stats counts the workload's sessions, turns and tokens.
func (w *Workload) Stats() Stats {
	var s Stats
	for _, ss := range w.Sessions {
		s.Sessions++
		if ss.Parent < 0 {
			s.TopLevel++
		}
		for _, t := range ss.Turns {
			s.Turns++
			s.InputTokens += int64(t.InputLen)
			s.OutputTokens += int64(t.OutputLen)
		}
	}
	return s
}

// IdealHitRate is the block-level prefix-hit ratio of an infinite cache
// replaying the turns session by session in order: leading blocks already
// seen / blocks (the Mooncake README's reference numbers). It costs a map
// entry per distinct block.
func (w *Workload) IdealHitRate() float64 {
	seen := make(map[uint64]struct{})
	var blocks, hits int64
	for _, ss := range w.Sessions {
		for _, t := range ss.Turns {
			prefix := true
			for _, b := range t.Blocks {
				blocks++
				if _, ok := seen[b]; ok && prefix {
					hits++
				} else {
					prefix = false
					seen[b] = struct{}{}
				}
			}
		}
	}
	if blocks == 0 {
		return 0
	}
	return float64(hits) / float64(blocks)
}

// Validate reports a structurally broken workload (the importers never
// produce one; hand-built workloads might).
func (w *Workload) Validate() error {
	if w.BlockSize <= 0 {
		return fmt.Errorf("trace: workload %q: block size %d", w.Name, w.BlockSize)
	}
	child := func(i, c int) bool { return c >= 0 && c < len(w.Sessions) && w.Sessions[c].Parent == i }
	for i, s := range w.Sessions {
		if s.Parent < -1 || s.Parent >= len(w.Sessions) || s.Parent == i {
			return fmt.Errorf("trace: session %q: bad parent %d", s.ID, s.Parent)
		}
		for j, t := range s.Turns {
			if t.InputLen <= 0 || t.OutputLen < 0 {
				return fmt.Errorf("trace: session %q turn %d: input %d output %d", s.ID, j, t.InputLen, t.OutputLen)
			}
			if (len(t.Blocks)-1)*w.BlockSize >= t.InputLen && len(t.Blocks) > 0 {
				return fmt.Errorf("trace: session %q turn %d: %d blocks of %d for %d tokens", s.ID, j, len(t.Blocks), w.BlockSize, t.InputLen)
			}
			for _, c := range t.Children {
				if !child(i, c) {
					return fmt.Errorf("trace: session %q turn %d: bad child %d", s.ID, j, c)
				}
			}
		}
		for _, c := range s.Tail {
			if !child(i, c) {
				return fmt.Errorf("trace: session %q: bad tail sub-agent %d", s.ID, c)
			}
		}
	}
	if err := w.parentCycle(); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// parentCycle names a session whose chain of parents never reaches a
// top-level session: a cycle, whose sessions would never start. The
// importers refuse such a trace with it, as Validate does.
func (w *Workload) parentCycle() error {
	for i, s := range w.Sessions {
		p := s.Parent
		for range w.Sessions {
			if p < 0 {
				break
			}
			p = w.Sessions[p].Parent
		}
		if p >= 0 {
			return fmt.Errorf("session %q: its parents form a cycle", w.Sessions[i].ID)
		}
	}
	return nil
}

// maxTokens bounds a turn's input and output lengths and a block's size in
// every importer: no model has a context near it, and a garbage count past it
// would overflow the arithmetic on token positions downstream.
const maxTokens = 1 << 30

// namespace makes a file-local id global: files are numbered in load
// order, and a file's ids live in its own 40-bit space.
func namespace(file int, id uint64) uint64 {
	return uint64(file)<<40 ^ id
}

// Merge appends b's sessions to w, fixing up parent and child indices.
func (w *Workload) Merge(b *Workload) error {
	if w.BlockSize == 0 {
		w.BlockSize = b.BlockSize
	}
	if b.BlockSize != w.BlockSize {
		return fmt.Errorf("trace: block size %d of %q differs from %d", b.BlockSize, b.Name, w.BlockSize)
	}
	off := len(w.Sessions)
	for _, s := range b.Sessions {
		if s.Parent >= 0 {
			s.Parent += off
		}
		for j := range s.Turns {
			for k := range s.Turns[j].Children {
				s.Turns[j].Children[k] += off
			}
		}
		for k := range s.Tail {
			s.Tail[k] += off
		}
		w.Sessions = append(w.Sessions, s)
	}
	w.Warnings = append(w.Warnings, b.Warnings...)
	return nil
}
