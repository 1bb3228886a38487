package frontend

import (
	"path/filepath"
	"strings"
	"testing"

	"switchyard.dev/pkg/trace"
)

func TestTraceFileRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.TraceFile = path; c.SimToolCalls = true })
	body := `{"model":"m","tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"Read hello.txt please, now"}]}`
	resp := post(t, m.url+"/v1/chat/completions", body, "x-session-id", "ses_t", "x-parent-session-id", "ses_root", "x-request-id", "req-42")
	readAll(t, resp.Body)
	m.waitFinish(t)
	rec, line := readTrace(t, path)
	r := rec.Request
	if rec.Schema != trace.Schema || rec.EventType != "request_end" || rec.AgentContext == nil ||
		rec.AgentContext.SessionID != "ses_t" || rec.AgentContext.ParentSessionID != "ses_root" || rec.AgentContext.InputTrigger != "user_message" {
		t.Fatalf("record %s", line)
	}
	if rec.AgentContext.Tenant != "" {
		t.Fatalf("the anonymous tenant named: %s", line)
	}
	if r.XRequestID != "req-42" || r.Worker == nil || r.Worker.WorkerName != "worker-7" || r.InputTokens == nil || *r.InputTokens == 0 ||
		r.OutputTokens == nil || *r.OutputTokens == 0 || r.Replay == nil || len(r.Replay.InputSequenceHashes) != r.Replay.InputLength/16 ||
		r.FinishReasonMetadata.FinishReason != "tool_calls" || len(r.FinishReasonMetadata.ToolCalls) != 1 || r.FinishReasonMetadata.ToolCalls[0].Name != "read" {
		t.Fatalf("metrics %s", line)
	}
	// Full blocks only: a hash over a partial last block covers the
	// prompt's last few tokens, the template's known suffix and one or two
	// of the user's, which anyone with the tenant's (public) salt could
	// recover by trying the vocabulary.
	if r.Replay.InputLength%16 == 0 {
		t.Fatalf("the prompt (%d tokens) ends in a full block: the test needs a partial one", r.Replay.InputLength)
	}
	if strings.Contains(line, "hello.txt") {
		t.Fatal("trace records carry content")
	}
}

// TestTraceRecordsTheTenant: a keyed request's record names its tenant, so
// that a replay keeps two tenants' equal session ids apart; the anonymous
// tenant is left out.
func TestTraceRecordsTheTenant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	m := newMesh(t, func(c *Config, _ *fakeShim) {
		c.TraceFile = path
		c.APIKeys = map[string]string{"k-a": "acme"}
	})
	resp := post(t, m.url+"/v1/chat/completions", turn1, "x-api-key", "k-a", "x-session-id", "ses_t")
	readAll(t, resp.Body)
	m.waitFinish(t)
	if rec, line := readTrace(t, path); rec.AgentContext == nil || rec.AgentContext.Tenant != "acme" || rec.AgentContext.SessionID != "ses_t" {
		t.Fatalf("record %s", line)
	}
}
