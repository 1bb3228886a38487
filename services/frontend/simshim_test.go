package frontend

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard.dev/pkg/chat"
	engineshim "switchyard.dev/services/engine-shim"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// TestWithSimulatedEngine drives the frontend against the real engine shim
// (simulated engine, standalone) behind a fake scheduler: the real prefix
// cache must report the second turn of a session as cached, the simulated
// tool call must come back as a parsed call, and the text must be the
// detokenized output.
func TestWithSimulatedEngine(t *testing.T) {
	cfg := engineshim.DefaultConfig()
	cfg.WorkerID, cfg.SchedulerAddr, cfg.NumGPUBlocks, cfg.SpeedUp = "sim-0", "", 4096, 1000
	shim, _ := servicetest.Start(t, servicekit.Options{Name: "engine-shim", ShutdownTimeout: 2 * time.Second},
		func(srv *servicekit.Server) (*engineshim.Service, error) { return engineshim.New(cfg, srv) })

	m := toolMesh(t)
	// Point the fake scheduler at the real shim.
	m.sched.mu.Lock()
	m.sched.workerID, m.sched.addr = "sim-0", shim.Server.GRPCAddr()
	m.sched.mu.Unlock()

	tools := `"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]`
	msgs := `{"role":"system","content":"` + strings.Repeat("You are a careful coding agent. ", 30) + `"},{"role":"user","content":"Read hello.txt"}`
	resp := post(t, m.url+"/v1/chat/completions", `{"model":"m","max_tokens":40,`+tools+`,"messages":[`+msgs+`]}`, "x-session-id", "ses_sim")
	var c1 chat.ChatCompletion
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &c1); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	m.waitFinish(t)
	if resp.Header.Get(workerHeader) != "sim-0" || c1.Choices[0].FinishReason != "tool_calls" || len(c1.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("turn 1: %+v", c1.Choices[0])
	}
	tc := c1.Choices[0].Message.ToolCalls[0]
	if tc.Function.Name != "read" || tc.Function.Arguments != `{"path":""}` {
		t.Fatalf("call %+v", tc)
	}
	content := ""
	if c1.Choices[0].Message.Content != nil {
		content = *c1.Choices[0].Message.Content
	}
	asst, _ := json.Marshal(map[string]any{"role": "assistant", "content": content, "tool_calls": []any{map[string]any{
		"id": tc.ID, "type": "function", "function": map[string]string{"name": "read", "arguments": tc.Function.Arguments}}}})
	body2 := `{"model":"m","max_tokens":20,` + tools + `,"messages":[` + msgs + `,` + string(asst) + `,{"role":"tool","tool_call_id":"` + tc.ID + `","content":"hello from the file"}]}`
	resp = post(t, m.url+"/v1/chat/completions", body2, "x-session-id", "ses_sim")
	var c2 chat.ChatCompletion
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &c2); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	m.waitFinish(t)
	if c2.Usage.PromptTokensDetails.CachedTokens == 0 || c2.Choices[0].FinishReason == "tool_calls" || c2.Choices[0].Message.Content == nil || *c2.Choices[0].Message.Content == "" {
		t.Fatalf("turn 2: %+v usage %+v", c2.Choices[0], c2.Usage)
	}
	// Turn 2 repeated turn 1's prompt on the same worker, which kept it:
	// only what follows it crossed the wire.
	if got, err := testutil.GatherAndCount(shim.Server.Registry(), shim.Server.MetricName("prompt_bases_total")); err != nil || got != 1 {
		t.Fatalf("the shim counted %d prompt base outcomes (%v), want 1", got, err)
	}
	if s, n := testutil.ToFloat64(m.svc.metrics.bases.WithLabelValues("sent")), testutil.ToFloat64(m.svc.metrics.bases.WithLabelValues("not_held")); s != 1 || n != 0 {
		t.Fatalf("the frontend sent %v bases, %v not held; want 1 and 0", s, n)
	}
	t.Logf("turn 2: %d prompt tokens, %d cached; text %q", c2.Usage.PromptTokens, c2.Usage.PromptTokensDetails.CachedTokens, *c2.Choices[0].Message.Content)
}
