package frontend

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"switchyard.dev/pkg/trace"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
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

// TestTraceFileUnwritableRefusedAtStart: a --trace-file no record could be
// written to stops the frontend at start, naming the flag, instead of
// serving with every record dropped.
func TestTraceFileUnwritableRefusedAtStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	path := filepath.Join(t.TempDir(), "absent", "trace.jsonl")
	err := Main(ctx, []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "", "--trace-file", path})
	if err == nil || !strings.Contains(err.Error(), "--trace-file "+path) {
		t.Fatalf("--trace-file in a missing directory: %v", err)
	}
}

// TestTraceWriteFailureReported: a trace file that stops being writable
// after the start (here: its directory removed before the first record)
// is logged once at WARN, however many records it drops, and counted in
// the metrics, records and failures.
func TestTraceWriteFailureReported(t *testing.T) {
	t.Setenv("SWITCHYARD_REQUEST_TRACE_FILE_FLUSH_INTERVAL_MS", "10")
	dir := filepath.Join(t.TempDir(), "traces")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	opts := servicekit.Options{Name: "frontend", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	m := newMeshOn(t, opts, func(c *Config, _ *fakeShim) { c.TraceFile = filepath.Join(dir, "trace.jsonl") })
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		readAll(t, post(t, m.url+"/v1/chat/completions", turn1).Body)
		m.waitFinish(t)
	}
	lost := `switchyard_frontend_trace_records_dropped_total{reason="write_failed"} 2`
	servicetest.Eventually(t, "the lost records counted", func() bool {
		return strings.Contains(servicetest.Get(t, m.url+"/metrics"), lost)
	})
	metrics := servicetest.Get(t, m.url+"/metrics")
	if !strings.Contains(metrics, `switchyard_frontend_trace_records_dropped_total{reason="queue_full"} 0`) ||
		strings.Contains(metrics, "switchyard_frontend_trace_write_errors_total 0") {
		t.Errorf("metrics:\n%s", metrics)
	}
	if n := strings.Count(logs.String(), "request traces cannot be written"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

// lockedBuffer is a log destination that goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
