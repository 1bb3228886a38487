package frontend

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTraceFileRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.TraceFile = path; c.SimToolCalls = true })
	body := `{"model":"m","tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"Read hello.txt please"}]}`
	resp := post(t, m.url+"/v1/chat/completions", body, "x-session-id", "ses_t", "x-parent-session-id", "ses_root", "x-request-id", "req-42")
	readAll(t, resp.Body)
	m.waitFinish(t)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatal("no trace record")
	}
	line := sc.Text()
	var rec RequestTrace
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatal(err)
	}
	r := rec.Request
	if rec.Schema != TraceSchema || rec.EventType != "request_end" || rec.AgentContext == nil ||
		rec.AgentContext.SessionID != "ses_t" || rec.AgentContext.ParentSessionID != "ses_root" || rec.AgentContext.InputTrigger != "user_message" {
		t.Fatalf("record %s", line)
	}
	if r.XRequestID != "req-42" || r.WorkerID != "worker-7" || r.InputTokens == 0 || r.OutputTokens == 0 ||
		r.Replay == nil || len(r.Replay.InputSequenceHashes) != (r.Replay.InputLength+15)/16 ||
		r.Finish.FinishReason != "tool_calls" || len(r.Finish.ToolCalls) != 1 || r.Finish.ToolCalls[0].Name != "read" {
		t.Fatalf("metrics %s", line)
	}
	if strings.Contains(line, "hello.txt") {
		t.Fatal("trace records carry content")
	}
}
