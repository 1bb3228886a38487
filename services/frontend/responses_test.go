package frontend

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/tokenizer"
)

type respEvent struct {
	Type        string          `json:"type"`
	Seq         int             `json:"sequence_number"`
	OutputIndex int             `json:"output_index"`
	Delta       string          `json:"delta"`
	Item        json.RawMessage `json:"item"`
	Response    struct {
		Status string               `json:"status"`
		Error  map[string]string    `json:"error"`
		Output []json.RawMessage    `json:"output"`
		Usage  *chat.ResponsesUsage `json:"usage"`
	} `json:"response"`
}

func streamResponses(t *testing.T, m *mesh, body string, hdr ...string) []respEvent {
	t.Helper()
	resp := post(t, m.url+"/v1/responses", body, hdr...)
	if resp.StatusCode != 200 || resp.Header.Get(workerHeader) == "" {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
	}
	names, datas := sseEvents(t, resp.Body)
	evs := make([]respEvent, len(datas))
	for i, d := range datas {
		if err := json.Unmarshal([]byte(d), &evs[i]); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if evs[i].Type != names[i] || evs[i].Seq != i {
			t.Fatalf("event %d: name %q type %q seq %d", i, names[i], evs[i].Type, evs[i].Seq)
		}
	}
	return evs
}

func types(evs []respEvent) string {
	var b []string
	for _, e := range evs {
		b = append(b, strings.TrimPrefix(e.Type, "response."))
	}
	return strings.Join(b, " ")
}

func TestResponsesStreamText(t *testing.T) {
	m := newMesh(t, nil)
	body := `{"model":"gpt-x","stream":true,"store":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":"th-1","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex, a coding agent working in a sandboxed repository."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"Say hi to everyone here, in one short line."}]}],"tools":[{"type":"web_search"}]}`
	evs := streamResponses(t, m, body, "thread-id", "th-1", "session-id", "th-1")
	want := "created in_progress output_item.added content_part.added output_text.delta"
	if !strings.HasPrefix(types(evs), want) || !strings.HasSuffix(types(evs), "output_text.done content_part.done output_item.done completed") {
		t.Fatalf("events: %s", types(evs))
	}
	var text strings.Builder
	for _, e := range evs {
		if e.Type == "response.output_text.delta" {
			text.WriteString(e.Delta)
		}
	}
	last := evs[len(evs)-1].Response
	if text.String() != " Hello there, agent. All good." || last.Status != "completed" || len(last.Output) != 1 || last.Usage == nil || last.Usage.InputTokens == 0 {
		t.Fatalf("text %q final %+v", text.String(), last)
	}
	if a := m.sched.lastRoute().GetAgent(); a.GetSessionId() != "th-1" || a.GetHarness() != "codex" || a.GetInputTrigger().String() != "INPUT_TRIGGER_USER_MESSAGE" {
		t.Fatalf("agent %v", a)
	}
	m.waitFinish(t)
	// Turn 2 extends turn 1: cached tokens reported.
	body2 := strings.Replace(body, `]}],"tools"`, `]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":" Hello there, agent. All good."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"Again."}]}],"tools"`, 1)
	evs = streamResponses(t, m, body2, "thread-id", "th-1")
	if u := evs[len(evs)-1].Response.Usage; u == nil || u.InputTokensDetails.CachedTokens == 0 {
		t.Fatalf("turn 2 usage %+v", u)
	}
	m.waitFinish(t)
}

// A stream that fails after it began ends with response.failed, whose
// error code is OpenAI's vocabulary, not Anthropic's error type.
func TestResponsesFailedSpeaksOpenAI(t *testing.T) {
	m := newMesh(t, func(c *Config, s *fakeShim) {
		c.MigrationLimit = -1
		s.failAfter = status.Error(codes.Unavailable, "engine died")
	})
	evs := streamResponses(t, m, `{"model":"gpt-x","stream":true,"input":"hi"}`)
	last := evs[len(evs)-1]
	if last.Type != "response.failed" || last.Response.Status != "failed" || last.Response.Error["code"] != "server_error" {
		t.Fatalf("last event %s %+v, want response.failed with code server_error", last.Type, last.Response)
	}
	// The message streamed before the failure is in the failed answer, cut
	// short: incomplete, with the text the client already has.
	var streamed strings.Builder
	for _, e := range evs {
		if e.Type == "response.output_text.delta" {
			streamed.WriteString(e.Delta)
		}
	}
	var item struct {
		Type, Status string
		Content      []struct{ Text string }
	}
	if len(last.Response.Output) != 1 || json.Unmarshal(last.Response.Output[0], &item) != nil || item.Type != "message" ||
		item.Status != "incomplete" || len(item.Content) != 1 || item.Content[0].Text != streamed.String() || streamed.Len() == 0 {
		t.Errorf("failed answer's output %s, want the message streamed (%q), incomplete", last.Response.Output, streamed.String())
	}
	m.waitFinish(t)
}

func TestResponsesToolCalls(t *testing.T) {
	m := toolMesh(t)
	for _, tc := range []struct {
		tools    string
		itemType string
		deltas   string
		value    string
	}{
		{tools: `[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}]`,
			itemType: "function_call", deltas: "function_call_arguments", value: `{"cmd":""}`},
		{tools: `[{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"apply_patch","format":{"type":"grammar"}}]},{"type":"tool_search","execution":"client"}]`,
			itemType: "custom_tool_call", deltas: "custom_tool_call_input", value: ""},
	} {
		body := `{"model":"m","stream":true,"input":"Read hello.txt","tools":` + tc.tools + `}`
		evs := streamResponses(t, m, body)
		ty := types(evs)
		if !strings.Contains(ty, "output_item.added "+tc.deltas+".delta "+tc.deltas+".done output_item.done completed") {
			t.Fatalf("%s: events %s", tc.itemType, ty)
		}
		final := evs[len(evs)-1].Response.Output
		var item struct {
			Type, ID, CallID, Name, Status string
			Arguments, Input               *string
		}
		json.Unmarshal(final[len(final)-1], &item)
		var callID struct {
			CallID string `json:"call_id"`
		}
		json.Unmarshal(final[len(final)-1], &callID)
		got := item.Arguments
		if tc.itemType == "custom_tool_call" {
			got = item.Input
		}
		if item.Type != tc.itemType || item.Status != "completed" || !strings.HasPrefix(callID.CallID, "call_") || got == nil || *got != tc.value {
			t.Fatalf("item %s", final[len(final)-1])
		}
		m.waitFinish(t)
	}
	// Function and custom call outputs come back as input items.
	next := `{"model":"m","input":[{"role":"user","content":"Read hello.txt"},{"type":"reasoning","summary":[]},{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{\"cmd\":\"cat hello.txt\"}"},{"type":"function_call_output","call_id":"c1","output":"hello"},{"type":"custom_tool_call","call_id":"c2","name":"apply_patch","input":"*** Begin Patch"},{"type":"custom_tool_call_output","call_id":"c2","output":[{"type":"input_text","text":"ok"}]}],"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object"}}]}`
	resp := post(t, m.url+"/v1/responses", next)
	var out struct {
		Object string `json:"object"`
		Status string `json:"status"`
		Output []struct {
			Type string `json:"type"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &out); err != nil || out.Object != "response" || out.Status != "completed" || len(out.Output) != 1 || out.Output[0].Type != "message" {
		t.Fatalf("non-streamed %+v %v", out, err)
	}
	if tr := m.sched.lastRoute().GetAgent().GetInputTrigger().String(); tr != "INPUT_TRIGGER_TOOL_RESULT" {
		t.Fatalf("trigger %s", tr)
	}
}

func TestResponsesErrors(t *testing.T) {
	m := newMesh(t, nil)
	for _, body := range []string{
		`{"model":"m"}`,
		`{"model":"m","input":"hi","previous_response_id":"resp_1"}`,
		`{"model":"m","input":[{"type":"message","role":"wizard","content":"x"}]}`,
		`{"model":"m","input":"hi","max_output_tokens":0}`,
	} {
		resp := post(t, m.url+"/v1/responses", body)
		b := readAll(t, resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(b, `"invalid_request_error"`) {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
}

// TestResponsesContextLengthNamesItsFields: the context-window errors blame
// the Responses fields (input, max_output_tokens), not Chat Completions'.
func TestResponsesContextLengthNamesItsFields(t *testing.T) {
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.MaxContextTokens = 100 })
	for _, tt := range []struct{ body, param string }{
		{`{"model":"m","input":"hi","max_output_tokens":1000}`, "max_output_tokens"},
		{`{"model":"m","input":"` + strings.Repeat("word ", 200) + `"}`, "input"},
	} {
		resp := post(t, m.url+"/v1/responses", tt.body)
		b := readAll(t, resp.Body)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Param   string `json:"param"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(b), &e)
		if resp.StatusCode != 400 || e.Error.Code != "context_length_exceeded" || e.Error.Param != tt.param ||
			strings.Contains(e.Error.Message, "max_tokens") {
			t.Errorf("%.60s: %d %s", tt.body, resp.StatusCode, b)
		}
	}
}

// An answer cut at max_output_tokens is incomplete, and so is its message
// item, streamed or not: the text in it is not all the model would say.
func TestResponsesCutAnswerIsIncomplete(t *testing.T) {
	m := newMesh(t, func(_ *Config, s *fakeShim) {
		s.answer = tokenizer.Default().EncodeOrdinary(strings.Repeat(" one more word", 20))
	})
	body := `{"model":"m","input":"hi","max_output_tokens":16}`
	resp := postOK(t, m.url+"/v1/responses", body)
	var out struct {
		Status string `json:"status"`
		Output []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &out); err != nil {
		t.Fatal(err)
	}
	if out.Status != "incomplete" || len(out.Output) != 1 || out.Output[0].Status != "incomplete" {
		t.Errorf("cut answer: %+v, want the response and its message incomplete", out)
	}
	evs := streamResponses(t, m, `{"model":"m","stream":true,"input":"hi","max_output_tokens":16}`)
	var done struct {
		Status string `json:"status"`
	}
	for _, e := range evs {
		if e.Type == "response.output_item.done" {
			if err := json.Unmarshal(e.Item, &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	if last := evs[len(evs)-1]; last.Type != "response.incomplete" || done.Status != "incomplete" {
		t.Errorf("cut stream ends %s with its message %q, want response.incomplete and incomplete", last.Type, done.Status)
	}
}
