package frontend

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"switchyard.dev/pkg/trace"
	"switchyard.dev/services/servicekit/servicetest"
)

func TestTraceFileRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.TraceFile = path; c.SimToolCalls = true })
	body := `{"model":"m","tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"Read hello.txt please"}]}`
	resp := post(t, m.url+"/v1/chat/completions", body, "x-session-id", "ses_t", "x-parent-session-id", "ses_root", "x-request-id", "req-42")
	readAll(t, resp.Body)
	m.waitFinish(t)
	// Records are written off the request path and flushed every second.
	var line string
	servicetest.Poll(servicetest.Patience, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		if first, _, ok := strings.Cut(string(data), "\n"); ok {
			line = first
		}
		return line != ""
	})
	if line == "" {
		t.Fatal("no trace record written")
	}
	var env trace.Envelope
	if err := json.Unmarshal([]byte(line), &env); err != nil || env.Event == nil {
		t.Fatalf("not a trace envelope: %s (%v)", line, err)
	}
	rec := env.Event
	r := rec.Request
	if rec.Schema != trace.Schema || rec.EventType != "request_end" || rec.AgentContext == nil ||
		rec.AgentContext.SessionID != "ses_t" || rec.AgentContext.ParentSessionID != "ses_root" || rec.AgentContext.InputTrigger != "user_message" {
		t.Fatalf("record %s", line)
	}
	if r.XRequestID != "req-42" || r.Worker == nil || r.Worker.WorkerName != "worker-7" || r.InputTokens == nil || *r.InputTokens == 0 ||
		r.OutputTokens == nil || *r.OutputTokens == 0 || r.Replay == nil || len(r.Replay.InputSequenceHashes) != (r.Replay.InputLength+15)/16 ||
		r.FinishReasonMetadata.FinishReason != "tool_calls" || len(r.FinishReasonMetadata.ToolCalls) != 1 || r.FinishReasonMetadata.ToolCalls[0].Name != "read" {
		t.Fatalf("metrics %s", line)
	}
	if strings.Contains(line, "hello.txt") {
		t.Fatal("trace records carry content")
	}
}
