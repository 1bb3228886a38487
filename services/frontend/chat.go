package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/chat"
)

// serveChat is POST /v1/chat/completions.
func (s *Service) serveChat(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	tenant, agent, body, err := s.readRequest(r)
	if err != nil {
		return err
	}
	req, err := decodeBody(s, tenant, agent, func(prev *chat.PrevBody) (*chat.ChatCompletionRequest, *chat.PrevBody, error) {
		return chat.DecodeChatCompletion(body, prev)
	})
	if err != nil {
		return err
	}
	if err := s.checkModel(req.Model); err != nil {
		return err
	}
	if err := checkChatRequest(req); err != nil {
		return err
	}
	conv, err := req.Conversation()
	if err != nil {
		return err
	}
	agent = agentctx.WithBodyFallback(agent, req.PromptCacheKey, "")
	agent.InputTrigger = agentctx.TriggerForChat(req.LastRole())
	tr := &turnRequest{
		api: apiChat, requestID: newID("chatcmpl-"), tenant: tenant, agent: agent, conv: conv,
		maxTokens: req.LimitTokens(), temp: req.Temperature, topP: req.TopP, seed: req.Seed, start: start,
		model: req.Model, xRequestID: r.Header.Get("x-request-id"),
	}
	if tr.stops, err = req.Stops(); err != nil {
		return err
	}
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	if req.Stream {
		out := &chatStream{w: w, id: tr.requestID, model: model, created: s.now(),
			includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
		res, err := s.runTurn(r.Context(), tr, out)
		if err != nil {
			if out.sse != nil {
				out.fail(err)
			}
			return err
		}
		return out.end(res)
	}
	out := &chatCollect{w: w}
	res, err := s.runTurn(r.Context(), tr, out)
	if err != nil {
		return err
	}
	msg := chat.ChatOutMessage{Role: "assistant"}
	if r := out.reason.String(); r != "" {
		msg.ReasoningContent = &r
	}
	if text := out.text.String(); text != "" || len(res.toolCalls) == 0 {
		msg.Content = &text
	}
	for _, tc := range res.toolCalls {
		msg.ToolCalls = append(msg.ToolCalls, chat.ChatToolCall{ID: tc.ID, Type: "function",
			Function: chat.ChatFunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return writeJSON(w, http.StatusOK, chat.ChatCompletion{
		ID: tr.requestID, Object: "chat.completion", Created: s.now(), Model: model,
		Choices: []chat.ChatChoice{{Index: 0, Message: msg, FinishReason: res.finish}},
		Usage:   chat.NewChatUsage(res.promptTokens, res.completion, res.cached),
	})
}

// chatCollect gathers a non-streamed answer.
type chatCollect struct {
	w      http.ResponseWriter
	text   strings.Builder
	reason strings.Builder
}

func (c *chatCollect) begin(workerID string, _ int) error {
	c.w.Header().Set(workerHeader, workerID)
	return nil
}
func (c *chatCollect) content(t string) error       { c.text.WriteString(t); return nil }
func (c *chatCollect) reasoning(t string) error     { c.reason.WriteString(t); return nil }
func (c *chatCollect) toolCall(chat.ToolCall) error { return nil }

// chatStream writes Chat Completions chunks as OpenAI does: a first chunk
// with the role, content and tool-call deltas, a last chunk with the finish
// reason, then (include_usage) a chunk with no choices and the usage, then
// [DONE].
type chatStream struct {
	w            http.ResponseWriter
	sse          *sseWriter
	id, model    string
	created      int64
	includeUsage bool
	calls        int
}

var nullJSON = json.RawMessage("null")

func (c *chatStream) chunk(delta chat.ChatDelta, finish *string) chat.ChatCompletionChunk {
	ch := chat.ChatCompletionChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
		Choices: []chat.ChatChunkChoice{{Index: 0, Delta: delta, FinishReason: finish}}}
	if c.includeUsage {
		ch.Usage = nullJSON
	}
	return ch
}

func (c *chatStream) begin(workerID string, _ int) error {
	c.sse = startSSE(c.w, workerID)
	empty := ""
	return c.sse.data(c.chunk(chat.ChatDelta{Role: "assistant", Content: &empty}, nil))
}

func (c *chatStream) content(t string) error {
	return c.sse.data(c.chunk(chat.ChatDelta{Content: &t}, nil))
}

func (c *chatStream) reasoning(t string) error {
	return c.sse.data(c.chunk(chat.ChatDelta{ReasoningContent: &t}, nil))
}

func (c *chatStream) toolCall(tc chat.ToolCall) error {
	idx := c.calls
	c.calls++
	return c.sse.data(c.chunk(chat.ChatDelta{ToolCalls: []chat.ChatToolCall{{
		Index: &idx, ID: tc.ID, Type: "function", Function: chat.ChatFunctionCall{Name: tc.Name, Arguments: tc.Arguments},
	}}}, nil))
}

func (c *chatStream) end(res *turnResult) error {
	finish := res.finish
	if err := c.sse.data(c.chunk(chat.ChatDelta{}, &finish)); err != nil {
		return err
	}
	if c.includeUsage {
		u, err := json.Marshal(chat.NewChatUsage(res.promptTokens, res.completion, res.cached))
		if err != nil {
			return err
		}
		if err := c.sse.data(chat.ChatCompletionChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created,
			Model: c.model, Choices: []chat.ChatChunkChoice{}, Usage: u}); err != nil {
			return err
		}
	}
	return c.sse.raw("", []byte("[DONE]"))
}

// fail reports an error in-band once streaming has begun, as OpenAI does.
func (c *chatStream) fail(err error) {
	ae := toAPIError(err)
	if ae.Status == 499 {
		return
	}
	c.sse.raw("", openAIErrorBody(ae))
}

// checkChatRequest rejects, as OpenAI (and vLLM) answer them, the requests
// that pkg/chat's decoder lets through because their fields are valid one
// by one: each is a 400 invalid_request_error naming the field.
func checkChatRequest(req *chat.ChatCompletionRequest) error {
	if req.StreamOptions != nil && !req.Stream {
		return badRequestf("stream_options", "stream_options is only allowed when stream is true")
	}
	functions := map[string]bool{}
	for i, t := range req.Tools {
		if t.Type != "" && t.Type != "function" {
			continue
		}
		// OpenAI's documented rule for function names.
		if !validFunctionName(t.Function.Name) {
			return badRequestf(fmt.Sprintf("tools[%d].function.name", i),
				"function name %q must be 1 to 64 letters, digits, '_' or '-'", t.Function.Name)
		}
		functions[t.Function.Name] = true
	}
	if err := checkChatToolChoice(req.ToolChoice, functions, req.Tools != nil); err != nil {
		return err
	}
	return checkChatToolMessages(req.Messages)
}

func validFunctionName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkChatToolChoice: tool_choice is "none", "auto", "required" or a named
// function; a named function must be declared, and "required" needs tools
// (toolsSent: the request has a tools member; with "tools": [] OpenAI and
// vLLM take "required" as "none").
func checkChatToolChoice(raw json.RawMessage, functions map[string]bool, toolsSent bool) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch {
		case mode == "none" || mode == "auto":
			return nil
		case mode == "required" && toolsSent:
			return nil
		case mode == "required":
			return badRequestf("tool_choice", `tool_choice "required" is only allowed when tools are specified`)
		}
		return badRequestf("tool_choice", `tool_choice %q is not one of "none", "auto", "required"`, mode)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return badRequestf("tool_choice", "tool_choice must be a string or an object")
	}
	// Other object types (allowed_tools, custom) choose among tools
	// pkg/chat does not render; they are left to upstream's judgement.
	if named.Type == "function" && !functions[named.Function.Name] {
		return badRequestf("tool_choice", "tool_choice names function %q, which tools does not declare", named.Function.Name)
	}
	return nil
}

// checkChatToolMessages: a tool message answers a call an earlier assistant
// message made, and a call is answered before the conversation goes on
// (OpenAI: "messages with role 'tool' must be a response to a preceeding
// message with 'tool_calls'"). OpenAI wants the answers right after the
// calls; any later tool message is accepted here. Legacy role "function"
// messages carry no call ids and are not paired.
func checkChatToolMessages(msgs []chat.ChatMessage) error {
	answered := map[string]bool{} // by call id, for the calls made so far
	for i, m := range msgs {
		switch m.Role {
		case "assistant":
			for _, tc := range m.ToolCalls {
				answered[tc.ID] = false
			}
		case "tool":
			if m.ToolCallID == "" {
				return badRequestf(fmt.Sprintf("messages[%d].tool_call_id", i), "a tool message needs the tool_call_id of the call it answers")
			}
			if _, called := answered[m.ToolCallID]; !called {
				return badRequestf(fmt.Sprintf("messages[%d].role", i),
					"a tool message must answer a tool call of an earlier assistant message; no call has id %q", m.ToolCallID)
			}
			answered[m.ToolCallID] = true
		}
	}
	for i, m := range msgs {
		for _, tc := range m.ToolCalls {
			// The last message's calls may still wait for their answers.
			if m.Role == "assistant" && !answered[tc.ID] && i < len(msgs)-1 {
				return badRequestf(fmt.Sprintf("messages[%d].tool_calls", i),
					"an assistant message with tool_calls must be followed by tool messages answering each; call %q has none", tc.ID)
			}
		}
	}
	return nil
}
