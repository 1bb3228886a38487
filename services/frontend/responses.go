package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/chat"
)

// serveResponses is POST /v1/responses (OpenAI Responses), what Codex speaks.
func (s *Service) serveResponses(w http.ResponseWriter, r *http.Request) error {
	tr, req, err := readRequest(s, r, apiResponses, chat.DecodeResponses)
	if err != nil {
		return err
	}
	if err := s.checkModel(req.Model); err != nil {
		return err
	}
	// OpenAI's minimum (pkg/chat leaves it to the API), after the model so
	// that an unknown model is what a request with both wrong is told.
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 16 {
		return &apiError{Status: http.StatusBadRequest, Kind: "invalid_request_error", Param: "max_output_tokens",
			Code: "integer_below_min_value", Message: fmt.Sprintf("max_output_tokens must be at least 16, not %d", *req.MaxOutputTokens)}
	}
	conv, kinds, err := req.CheckedConversation()
	if err != nil {
		return err
	}
	tr.conv = conv
	tr.agent = agentctx.WithBodyFallback(tr.agent, req.PromptCacheKey, "")
	tr.agent.InputTrigger = req.Trigger()
	tr.requestID, tr.model, tr.callPrefix = newID("resp_"), req.Model, "call_"
	tr.maxTokens, tr.maxTokensParam, tr.temp, tr.topP = req.LimitTokens(), "max_output_tokens", req.Temperature, req.TopP
	return s.reply(r.Context(), tr, newResponsesOut(w, tr.requestID, s.now(), req, s.answerModel(req.Model), kinds))
}

// responseObject is a Response as the API returns it.
type responseObject struct {
	ID                 string               `json:"id"`
	Object             string               `json:"object"`
	CreatedAt          int64                `json:"created_at"`
	Status             string               `json:"status"`
	Error              any                  `json:"error"`
	IncompleteDetails  any                  `json:"incomplete_details"`
	Instructions       *string              `json:"instructions"`
	MaxOutputTokens    *int64               `json:"max_output_tokens"`
	Model              string               `json:"model"`
	Output             []any                `json:"output"`
	ParallelToolCalls  bool                 `json:"parallel_tool_calls"`
	PreviousResponseID *string              `json:"previous_response_id"`
	Reasoning          map[string]any       `json:"reasoning"`
	Store              bool                 `json:"store"`
	Temperature        float64              `json:"temperature"`
	Text               map[string]any       `json:"text"`
	ToolChoice         json.RawMessage      `json:"tool_choice"`
	Tools              []any                `json:"tools"`
	TopP               float64              `json:"top_p"`
	Truncation         string               `json:"truncation"`
	Usage              *chat.ResponsesUsage `json:"usage"`
	User               *string              `json:"user"`
	Metadata           json.RawMessage      `json:"metadata"`
	PromptCacheKey     *string              `json:"prompt_cache_key,omitempty"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type messageItem struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

// reasoningItem is the model's thinking as a Responses output item.
type reasoningItem struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"` // "reasoning"
	Status  string          `json:"status,omitempty"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
}

type reasoningText struct {
	Type string `json:"type"` // "reasoning_text"
	Text string `json:"text"`
}

type callItem struct {
	ID        string  `json:"id"`
	Type      string  `json:"type"` // function_call or custom_tool_call
	Status    string  `json:"status"`
	CallID    string  `json:"call_id"`
	Name      string  `json:"name"`
	Arguments *string `json:"arguments,omitempty"`
	Input     *string `json:"input,omitempty"`
}

// responsesOut builds a Response and, when streaming, writes its event
// sequence: response.created, response.in_progress, per output item
// output_item.added … output_item.done (text through content_part and
// output_text events, calls through function_call_arguments or
// custom_tool_call_input events), then response.completed (or
// response.incomplete when the output hit its token limit).
type responsesOut struct {
	w      http.ResponseWriter
	stream bool
	sse    *sseWriter
	resp   responseObject
	kinds  chat.ToolKinds
	seq    int
	msg    *messageItem // the open message item, if any
	text   strings.Builder
	rs     *reasoningItem // the open reasoning item, if any
	rsText strings.Builder
}

func newResponsesOut(w http.ResponseWriter, id string, created int64, req *chat.ResponsesRequest, model string, kinds chat.ToolKinds) *responsesOut {
	o := &responsesOut{w: w, stream: req.Stream, kinds: kinds}
	o.resp = responseObject{
		ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Model: model,
		Output: []any{}, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		MaxOutputTokens: req.MaxOutputTokens, Reasoning: map[string]any{"effort": nil, "summary": nil},
		Store: false, Temperature: 1, TopP: 1, Truncation: "disabled", Tools: []any{},
		Text:       map[string]any{"format": map[string]string{"type": "text"}},
		ToolChoice: json.RawMessage(`"auto"`), Metadata: json.RawMessage(`{}`),
	}
	if req.Instructions != "" {
		o.resp.Instructions = &req.Instructions
	}
	if req.Temperature != nil {
		o.resp.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		o.resp.TopP = *req.TopP
	}
	if len(req.ToolChoice) > 0 {
		o.resp.ToolChoice = req.ToolChoice
	}
	if len(req.Metadata) > 0 && string(req.Metadata) != "null" {
		o.resp.Metadata = req.Metadata
	}
	if req.PromptCacheKey != "" {
		o.resp.PromptCacheKey = &req.PromptCacheKey
	}
	return o
}

func (o *responsesOut) emit(typ string, fields map[string]any) error {
	if o.sse == nil {
		return nil
	}
	fields["type"] = typ
	fields["sequence_number"] = o.seq
	o.seq++
	return o.sse.event(typ, fields)
}

// header and streamed make the answer headed.
func (o *responsesOut) header() http.Header { return o.w.Header() }
func (o *responsesOut) streamed() bool      { return o.stream }

func (o *responsesOut) begin(workerID string, _ int) error {
	if !o.stream {
		o.w.Header().Set(workerHeader, workerID)
		return nil
	}
	o.sse = startSSE(o.w, workerID)
	snapshot := o.resp
	if err := o.emit("response.created", map[string]any{"response": snapshot}); err != nil {
		return err
	}
	return o.emit("response.in_progress", map[string]any{"response": snapshot})
}

// reasoning streams a reasoning item (it always comes first).
func (o *responsesOut) reasoning(t string) error {
	idx := len(o.resp.Output)
	if o.rs == nil {
		o.rs = &reasoningItem{ID: newID("rs_"), Type: "reasoning", Status: "in_progress", Summary: []any{}, Content: []reasoningText{}}
		o.rsText.Reset()
		if err := o.emit("response.output_item.added", map[string]any{"output_index": idx, "item": *o.rs}); err != nil {
			return err
		}
		if err := o.emit("response.content_part.added", map[string]any{"item_id": o.rs.ID, "output_index": idx, "content_index": 0,
			"part": reasoningText{Type: "reasoning_text"}}); err != nil {
			return err
		}
	}
	o.rsText.WriteString(t)
	return o.emit("response.reasoning_text.delta", map[string]any{"item_id": o.rs.ID, "output_index": idx, "content_index": 0, "delta": t})
}

// closeReasoning ends the open reasoning item with status: completed, or
// incomplete when the answer was cut there (max_output_tokens).
func (o *responsesOut) closeReasoning(status string) error {
	if o.rs == nil {
		return nil
	}
	idx := len(o.resp.Output)
	part := reasoningText{Type: "reasoning_text", Text: o.rsText.String()}
	o.rs.Status, o.rs.Content = status, []reasoningText{part}
	item := *o.rs
	o.rs = nil
	o.resp.Output = append(o.resp.Output, item)
	if err := o.emit("response.reasoning_text.done", map[string]any{"item_id": item.ID, "output_index": idx, "content_index": 0, "text": part.Text}); err != nil {
		return err
	}
	if err := o.emit("response.content_part.done", map[string]any{"item_id": item.ID, "output_index": idx, "content_index": 0, "part": part}); err != nil {
		return err
	}
	return o.emit("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

func (o *responsesOut) content(t string) error {
	if err := o.closeReasoning("completed"); err != nil {
		return err
	}
	idx := len(o.resp.Output)
	if o.msg == nil {
		o.msg = &messageItem{ID: newID("msg_"), Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}}
		o.text.Reset()
		if err := o.emit("response.output_item.added", map[string]any{"output_index": idx, "item": *o.msg}); err != nil {
			return err
		}
		if err := o.emit("response.content_part.added", map[string]any{"item_id": o.msg.ID, "output_index": idx, "content_index": 0,
			"part": outputText{Type: "output_text", Annotations: []any{}, Logprobs: []any{}}}); err != nil {
			return err
		}
	}
	o.text.WriteString(t)
	return o.emit("response.output_text.delta", map[string]any{"item_id": o.msg.ID, "output_index": idx, "content_index": 0,
		"delta": t, "logprobs": []any{}})
}

// closeMessage ends the open message item with status, as closeReasoning.
func (o *responsesOut) closeMessage(status string) error {
	if o.msg == nil {
		return nil
	}
	idx := len(o.resp.Output)
	part := outputText{Type: "output_text", Text: o.text.String(), Annotations: []any{}, Logprobs: []any{}}
	o.msg.Status, o.msg.Content = status, []outputText{part}
	item := *o.msg
	o.msg = nil
	o.resp.Output = append(o.resp.Output, item)
	if err := o.emit("response.output_text.done", map[string]any{"item_id": item.ID, "output_index": idx, "content_index": 0,
		"text": part.Text, "logprobs": []any{}}); err != nil {
		return err
	}
	if err := o.emit("response.content_part.done", map[string]any{"item_id": item.ID, "output_index": idx, "content_index": 0, "part": part}); err != nil {
		return err
	}
	return o.emit("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

func (o *responsesOut) toolCall(tc chat.ToolCall) error {
	if err := o.closeReasoning("completed"); err != nil {
		return err
	}
	if err := o.closeMessage("completed"); err != nil {
		return err
	}
	idx := len(o.resp.Output)
	empty := ""
	item := callItem{Type: "function_call", Status: "in_progress", CallID: tc.ID, Name: tc.Name}
	custom := o.kinds[tc.Name] == "custom"
	value := tc.Arguments
	if custom {
		// A freeform tool's input is the string the model passed.
		var s string
		if json.Unmarshal([]byte(value), &s) == nil {
			value = s
		}
		item.Type, item.ID, item.Input = "custom_tool_call", newID("ctc_"), &empty
	} else {
		item.ID, item.Arguments = newID("fc_"), &empty
	}
	if err := o.emit("response.output_item.added", map[string]any{"output_index": idx, "item": item}); err != nil {
		return err
	}
	if custom {
		if err := o.emit("response.custom_tool_call_input.delta", map[string]any{"item_id": item.ID, "output_index": idx, "delta": value}); err != nil {
			return err
		}
		if err := o.emit("response.custom_tool_call_input.done", map[string]any{"item_id": item.ID, "output_index": idx, "input": value}); err != nil {
			return err
		}
		item.Input = &value
	} else {
		if err := o.emit("response.function_call_arguments.delta", map[string]any{"item_id": item.ID, "output_index": idx, "delta": value}); err != nil {
			return err
		}
		if err := o.emit("response.function_call_arguments.done", map[string]any{"item_id": item.ID, "output_index": idx, "name": tc.Name, "arguments": value}); err != nil {
			return err
		}
		item.Arguments = &value
	}
	item.Status = "completed"
	o.resp.Output = append(o.resp.Output, item)
	return o.emit("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

func (o *responsesOut) end(res *turnResult) error {
	// The item open when the answer was cut at max_output_tokens is cut
	// too: incomplete, as the response is.
	last := "completed"
	if res.finish == "length" {
		last = "incomplete"
	}
	if err := o.closeReasoning(last); err != nil {
		return err
	}
	if err := o.closeMessage(last); err != nil {
		return err
	}
	o.resp.Usage = chat.NewResponsesUsage(res.promptTokens, res.completion, res.cached)
	o.resp.Status = "completed"
	event := "response.completed"
	if res.finish == "length" {
		o.resp.Status = "incomplete"
		o.resp.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
		event = "response.incomplete"
	}
	if !o.stream {
		return writeJSON(o.w, http.StatusOK, o.resp)
	}
	return o.emit(event, map[string]any{"response": o.resp})
}

// fail ends a started stream with response.failed.
func (o *responsesOut) fail(ae *apiError) {
	if o.sse == nil {
		return
	}
	o.resp.Status = "failed"
	// What was streamed stays in the answer: an item still open is cut
	// short, incomplete, with what it had.
	if o.rs != nil {
		item := *o.rs
		item.Status, item.Content = "incomplete", []reasoningText{{Type: "reasoning_text", Text: o.rsText.String()}}
		o.resp.Output, o.rs = append(o.resp.Output, item), nil
	}
	if o.msg != nil {
		item := *o.msg
		item.Status = "incomplete"
		item.Content = []outputText{{Type: "output_text", Text: o.text.String(), Annotations: []any{}, Logprobs: []any{}}}
		o.resp.Output, o.msg = append(o.resp.Output, item), nil
	}
	code := ae.Code
	if code == "" {
		code = ae.kindFor(apiResponses) // OpenAI's vocabulary, not Anthropic's types
	}
	o.resp.Error = map[string]string{"code": code, "message": ae.Message}
	o.emit("response.failed", map[string]any{"response": o.resp})
}
