package frontend

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// TraceSchema names the request-trace record format (Dynamo's current one,
// so its replay tools read Switchyard's traces).
const TraceSchema = "dynamo.request.trace.v1"

// RequestTrace is one request_end record: content-free (no prompt, no
// arguments), keyed by session.
type RequestTrace struct {
	Schema          string          `json:"schema"`
	EventType       string          `json:"event_type"`
	EventTimeUnixMS int64           `json:"event_time_unix_ms"`
	EventSource     string          `json:"event_source"`
	AgentContext    *TraceAgent     `json:"agent_context,omitempty"`
	Request         *RequestMetrics `json:"request"`
}

// TraceAgent is the identity part of a record.
type TraceAgent struct {
	SessionID       string `json:"session_id"`
	ParentSessionID string `json:"parent_session_id,omitempty"`
	SessionFinal    *bool  `json:"session_final,omitempty"`
	InputTrigger    string `json:"input_trigger,omitempty"`
	Compaction      bool   `json:"compaction,omitempty"`
	Tenant          string `json:"tenant,omitempty"`
	Harness         string `json:"harness,omitempty"`
}

// RequestMetrics are a request's numbers; zero values are omitted.
type RequestMetrics struct {
	RequestID         string          `json:"request_id"`
	XRequestID        string          `json:"x_request_id,omitempty"`
	API               string          `json:"api"`
	Model             string          `json:"model,omitempty"`
	InputTokens       int64           `json:"input_tokens"`
	OutputTokens      int64           `json:"output_tokens"`
	CachedTokens      int64           `json:"cached_tokens"`
	RequestReceivedMS int64           `json:"request_received_ms"`
	TTFTMS            float64         `json:"ttft_ms,omitempty"`
	TotalTimeMS       float64         `json:"total_time_ms"`
	AvgITLMS          float64         `json:"avg_itl_ms,omitempty"`
	KVHitRate         float64         `json:"kv_hit_rate"`
	WorkerID          string          `json:"worker_id,omitempty"`
	Replay            *TraceReplay    `json:"replay,omitempty"`
	Finish            *FinishMetadata `json:"finish_reason_metadata,omitempty"`
	Error             string          `json:"error,omitempty"`
}

// TraceReplay is what a replay needs to recreate the request's KV footprint.
type TraceReplay struct {
	BlockSize           int      `json:"trace_block_size"`
	InputLength         int      `json:"input_length"`
	InputSequenceHashes []uint64 `json:"input_sequence_hashes"`
}

// FinishMetadata says how a request ended; tool arguments are never kept.
type FinishMetadata struct {
	FinishReason        string          `json:"finish_reason,omitempty"`
	BackendFinishReason string          `json:"backend_finish_reason,omitempty"`
	ToolCalls           []TraceToolCall `json:"tool_calls"`
}

// TraceToolCall names one call the model made.
type TraceToolCall struct {
	ChoiceIndex   int    `json:"choice_index"`
	ToolCallIndex int    `json:"tool_call_index"`
	ID            string `json:"id,omitempty"`
	Name          string `json:"name,omitempty"`
}

// TraceSink receives request-trace records. Implementations must not block
// for long: Record runs on the request path, after the response.
type TraceSink interface {
	Record(RequestTrace)
}

// replayHashes are the sequence hashes of the full blocks plus, when the
// prompt ends in a partial block, one chained over that tail, so a replay
// knows the exact prompt length's footprint.
func replayHashes(h kvhash.Hasher, tokens []uint32, full []kv.BlockHash) []uint64 {
	out := make([]uint64, len(full), len(full)+1)
	for i, b := range full {
		out[i] = uint64(b)
	}
	if tail := tokens[len(full)*h.BlockSize:]; len(tail) > 0 {
		local := kvhash.LocalHash(tail, h.Seed)
		if len(full) == 0 {
			out = append(out, uint64(kvhash.Root(local)))
		} else {
			out = append(out, uint64(kvhash.Chain(full[len(full)-1], local)))
		}
	}
	return out
}

// fileTraceSink appends records as JSON lines to a file.
type fileTraceSink struct {
	mu  sync.Mutex
	f   *os.File
	enc *json.Encoder
}

func newFileTraceSink(path string) (*fileTraceSink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("frontend: trace file: %w", err)
	}
	return &fileTraceSink{f: f, enc: json.NewEncoder(f)}, nil
}

func (s *fileTraceSink) Record(r RequestTrace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.enc.Encode(r)
	}
}

func (s *fileTraceSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.f
	s.f = nil
	if f == nil {
		return nil
	}
	return f.Close()
}

func msSince(t time.Time, now time.Time) float64 { return float64(now.Sub(t).Microseconds()) / 1000 }
