package trace

import (
	"fmt"

	"switchyard.dev/pkg/kv"
)

// Schema is the record schema Switchyard writes (Dynamo's).
const Schema = "dynamo.request.trace.v1"

// Event types of a Record.
const (
	EventRequestEnd = "request_end"
	EventToolStart  = "tool_start"
	EventToolEnd    = "tool_end"
	EventToolError  = "tool_error"
)

// Record is one dynamo.request.trace.v1 record (dynamo.md §2.2). Optional
// fields are pointers or omitempty so that unknown values are omitted, not
// written as zero. It never carries prompt or response content.
type Record struct {
	Schema          string          `json:"schema"`
	EventType       string          `json:"event_type"`
	EventTimeUnixMs uint64          `json:"event_time_unix_ms"`
	EventSource     string          `json:"event_source,omitempty"`
	AgentContext    *AgentContext   `json:"agent_context,omitempty"`
	Request         *RequestMetrics `json:"request,omitempty"`
	Tool            *ToolEvent      `json:"tool,omitempty"`
	// Origin is where the record was read (ReadRecords), for an error
	// about it to name: it is no part of the record, and never written.
	Origin Origin `json:"-"`
}

// Origin is where a record was read: the file's name and the line.
type Origin struct {
	File string
	Line int // 1-based; 0 if not known
}

// label says where a record of the workload named name was read: its line
// where name is its file's, else its file and line; "" if not read.
func (o Origin) label(name string) string {
	switch {
	case o.File == "" && o.Line == 0:
		return ""
	case o.Line == 0:
		return o.File
	case o.File == "" || o.File == name:
		return fmt.Sprintf("line %d", o.Line)
	}
	return fmt.Sprintf("%s:%d", o.File, o.Line)
}

// AgentContext is the session identity of the request (dynamo.md §1.1).
type AgentContext struct {
	// Tenant is the frontend's tenant of the request (omitted for the
	// anonymous one): session ids are each tenant's own, so the same id of
	// two tenants is two sessions.
	Tenant             string `json:"tenant,omitempty"`
	SessionTypeID      string `json:"session_type_id,omitempty"`
	SessionID          string `json:"session_id,omitempty"`
	ParentSessionID    string `json:"parent_session_id,omitempty"`
	TrajectoryID       string `json:"trajectory_id,omitempty"`
	ParentTrajectoryID string `json:"parent_trajectory_id,omitempty"`
	SessionFinal       bool   `json:"session_final,omitempty"`
	InputTrigger       string `json:"input_trigger,omitempty"`
	Compaction         bool   `json:"compaction,omitempty"`
}

// Sessions is the record's session and parent as a replay or a trace view
// groups records: the session ids (else the trajectory ids), scoped by the
// tenant when the record names one, since session ids are each tenant's
// own. A nil context has none.
func (ac *AgentContext) Sessions() (session, parent string) {
	if ac == nil {
		return "", ""
	}
	session, parent = ac.SessionID, ac.ParentSessionID
	if session == "" {
		session, parent = ac.TrajectoryID, ac.ParentTrajectoryID
	}
	if session != "" && ac.Tenant != "" {
		session = ac.Tenant + "/" + session
		if parent != "" {
			parent = ac.Tenant + "/" + parent
		}
	}
	return session, parent
}

// RequestMetrics are one request's counts and timings.
type RequestMetrics struct {
	RequestID            string                `json:"request_id"`
	XRequestID           string                `json:"x_request_id,omitempty"`
	Model                string                `json:"model,omitempty"`
	InputTokens          *uint64               `json:"input_tokens,omitempty"`
	OutputTokens         *uint64               `json:"output_tokens,omitempty"`
	CachedTokens         *uint64               `json:"cached_tokens,omitempty"`
	RequestReceivedMs    *uint64               `json:"request_received_ms,omitempty"`
	PrefillWaitTimeMs    *float64              `json:"prefill_wait_time_ms,omitempty"`
	PrefillTimeMs        *float64              `json:"prefill_time_ms,omitempty"`
	TTFTMs               *float64              `json:"ttft_ms,omitempty"`
	TotalTimeMs          *float64              `json:"total_time_ms,omitempty"`
	AvgITLMs             *float64              `json:"avg_itl_ms,omitempty"`
	KVHitRate            *float64              `json:"kv_hit_rate,omitempty"`
	QueueDepth           *uint64               `json:"queue_depth,omitempty"`
	Worker               *WorkerInfo           `json:"worker,omitempty"`
	Replay               *Replay               `json:"replay,omitempty"`
	FinishReasonMetadata *FinishReasonMetadata `json:"finish_reason_metadata,omitempty"`
	// Migrations are the workers the request failed on and moved away
	// from, oldest first; Worker is where it ended. Switchyard's own, beyond
	// Dynamo's schema.
	Migrations []Migration `json:"migrations,omitempty"`
}

// Migration is one move of a request to another worker after its worker
// failed.
type Migration struct {
	FromWorker string `json:"from_worker"`
	// Reason is how the attempt failed: dial, unavailable, internal,
	// aborted or deadline_exceeded.
	Reason string `json:"reason"`
	// AfterTokens is how many output tokens the client had been sent when
	// the worker failed (0: before the first token); the next worker's
	// prompt carried them.
	AfterTokens int `json:"after_tokens,omitempty"`
}

// WorkerInfo says where the request ran. Switchyard's workers are named by
// strings; WorkerName carries that name beside Dynamo's numeric ids.
type WorkerInfo struct {
	PrefillWorkerID *uint64 `json:"prefill_worker_id,omitempty"`
	DecodeWorkerID  *uint64 `json:"decode_worker_id,omitempty"`
	WorkerName      string  `json:"worker_name,omitempty"`
}

// Replay is the block a replayer needs: the prompt as rolling sequence
// hashes, one per block of TraceBlockSize tokens. Switchyard's frontend
// writes full blocks only (SequenceHashes); other producers' last hash may
// cover a partial block, which readers accept too.
type Replay struct {
	TraceBlockSize      int      `json:"trace_block_size"`
	InputLength         int      `json:"input_length"`
	InputSequenceHashes []uint64 `json:"input_sequence_hashes"`
}

// FinishReasonMetadata is the final finish reason and the tool calls the
// model emitted (names and ids only; arguments are never stored).
type FinishReasonMetadata struct {
	FinishReason        string     `json:"finish_reason,omitempty"`
	BackendFinishReason string     `json:"backend_finish_reason,omitempty"`
	ToolCalls           []ToolCall `json:"tool_calls"`
}

// ToolCall names one tool call of a response.
type ToolCall struct {
	ChoiceIndex   uint32 `json:"choice_index"`
	ToolCallIndex uint32 `json:"tool_call_index"`
	ID            string `json:"id,omitempty"`
	Name          string `json:"name,omitempty"`
}

// ToolEvent is a harness tool record (tool_start / tool_end / tool_error).
type ToolEvent struct {
	ToolCallID      string   `json:"tool_call_id"`
	ToolClass       string   `json:"tool_class"`
	StartedAtUnixMs *uint64  `json:"started_at_unix_ms,omitempty"`
	EndedAtUnixMs   *uint64  `json:"ended_at_unix_ms,omitempty"`
	Status          string   `json:"status,omitempty"`
	DurationMs      *float64 `json:"duration_ms,omitempty"`
	OutputTokens    *uint64  `json:"output_tokens,omitempty"`
}

// Envelope is a file-sink line: ms since the writer started, and the record.
type Envelope struct {
	Timestamp uint64  `json:"timestamp"`
	Event     *Record `json:"event"`
}

// U64 and F64 make optional fields easy to fill.
func U64(v uint64) *uint64   { return &v }
func F64(v float64) *float64 { return &v }

// SequenceHashes converts a prompt's kvhash block hashes (full blocks only)
// into the replay block's input_sequence_hashes: a record's len(hashes) is
// input_length / block size rounded down. No hash covers a partial last
// block: it would cover only the prompt's last few tokens, mostly the chat
// template's known suffix, and the rest could be found by trying every
// token (the salt is a tenant's name, not a secret); nor could a replay
// use it, since an engine caches full blocks only.
func SequenceHashes(hashes []kv.BlockHash) []uint64 {
	out := make([]uint64, len(hashes))
	for i, h := range hashes {
		out[i] = uint64(h)
	}
	return out
}
