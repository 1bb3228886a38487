package frontend

import (
	"encoding/json"
	"net/http"
	"strings"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/chat"
)

// readMessages reads an Anthropic request into its turn; requireMax is
// false for count_tokens, whose body has no max_tokens.
func (s *Service) readMessages(r *http.Request, requireMax bool) (*turnRequest, *chat.MessagesRequest, error) {
	tr, req, err := readRequest(s, r, apiMessages, func(body []byte, prev *chat.PrevBody) (*chat.MessagesRequest, *chat.PrevBody, error) {
		return chat.DecodeMessages(body, requireMax, prev)
	})
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkModel(req.Model); err != nil {
		return nil, nil, err
	}
	if tr.conv, err = req.CheckedConversation(!s.cfg.KeepBillingHeader); err != nil {
		return nil, nil, err
	}
	tr.agent = agentctx.WithBodyFallback(tr.agent, "", req.UserID())
	tr.agent.InputTrigger = req.Trigger()
	return tr, req, nil
}

// serveMessages is POST /v1/messages (also with ?beta=true, which Claude Code
// adds; the query string does not change the protocol).
func (s *Service) serveMessages(w http.ResponseWriter, r *http.Request) error {
	tr, req, err := s.readMessages(r, true)
	if err != nil {
		return err
	}
	tr.requestID, tr.model, tr.callPrefix = newID("msg_"), req.Model, "toolu_"
	tr.maxTokens, tr.maxTokensParam, tr.temp, tr.topP, tr.stops = req.MaxTokens, "max_tokens", req.Temperature, req.TopP, req.StopSequences
	model := s.answerModel(req.Model)
	if req.Stream {
		return s.reply(r.Context(), tr, &messagesStream{w: w, id: tr.requestID, model: model})
	}
	return s.reply(r.Context(), tr, &messagesCollect{collected: collected{w: w}, id: tr.requestID, model: model})
}

// messagesCollect writes a non-streamed answer.
type messagesCollect struct {
	collected
	id, model string
}

func (m *messagesCollect) end(res *turnResult) error {
	var content []chat.AnthropicOut
	if r := m.reason.String(); r != "" {
		sig := ""
		content = append(content, chat.AnthropicOut{Type: "thinking", Thinking: &r, Signature: &sig})
	}
	if text := m.text.String(); text != "" || len(res.toolCalls) == 0 {
		content = append(content, chat.AnthropicOut{Type: "text", Text: &text})
	}
	for _, tc := range res.toolCalls {
		content = append(content, chat.AnthropicOut{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: toolInput(tc.Arguments)})
	}
	stop, seq := anthropicStop(res)
	return writeJSON(m.w, http.StatusOK, chat.AnthropicResponse{
		ID: m.id, Type: "message", Role: "assistant", Model: m.model, Content: content,
		StopReason: &stop, StopSequence: seq, Usage: chat.NewAnthropicUsage(res.promptTokens, res.completion, res.cached),
	})
}

// anthropicStop is the stop_reason and stop_sequence of a finished turn.
func anthropicStop(res *turnResult) (string, *string) {
	if res.stopSequence != "" && res.finish == "stop" {
		s := res.stopSequence
		return "stop_sequence", &s
	}
	return chat.StopReason(res.finish), nil
}

// toolInput is a call's arguments as the JSON object Anthropic's input must be.
func toolInput(args string) json.RawMessage {
	a := strings.TrimSpace(args)
	if strings.HasPrefix(a, "{") && json.Valid([]byte(a)) {
		return json.RawMessage(a)
	}
	return json.RawMessage(`{}`)
}

// serveCountTokens is POST /v1/messages/count_tokens: the prompt's tokens as
// this frontend renders and tokenizes it.
func (s *Service) serveCountTokens(w http.ResponseWriter, r *http.Request) error {
	tr, _, err := s.readMessages(r, false)
	if err != nil {
		return err
	}
	tk, _, err := chat.Prepare(s.template, s.tok, s.hasher(tr.tenant), tr.conv, nil)
	if err != nil {
		return badRequestf("", "%v", err)
	}
	return writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(tk.Tokens)})
}

// messagesStream writes Anthropic's event sequence: message_start, ping,
// per block content_block_start / _delta... / _stop, message_delta (stop
// reason and final usage), message_stop.
type messagesStream struct {
	w         http.ResponseWriter
	sse       *sseWriter
	id, model string
	index     int  // next block index
	textOpen  bool // a text block is open at index-1
	thinkOpen bool // a thinking block is open at index-1
}

// header and streamed make the answer headed.
func (m *messagesStream) header() http.Header { return m.w.Header() }
func (m *messagesStream) streamed() bool      { return true }

func (m *messagesStream) begin(workerID string, promptTokens int) error {
	m.sse = startSSE(m.w, workerID)
	msg := chat.AnthropicResponse{ID: m.id, Type: "message", Role: "assistant", Model: m.model, Content: []chat.AnthropicOut{},
		Usage: chat.AnthropicUsage{InputTokens: int64(promptTokens), OutputTokens: 1}}
	if err := m.sse.event("message_start", map[string]any{"type": "message_start", "message": msg}); err != nil {
		return err
	}
	return m.sse.event("ping", map[string]string{"type": "ping"})
}

// reasoning streams a thinking block (it always comes first).
func (m *messagesStream) reasoning(t string) error {
	if !m.thinkOpen {
		if err := m.sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": m.index,
			"content_block": map[string]string{"type": "thinking", "thinking": "", "signature": ""}}); err != nil {
			return err
		}
		m.thinkOpen = true
		m.index++
	}
	return m.sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": m.index - 1,
		"delta": map[string]string{"type": "thinking_delta", "thinking": t}})
}

// closeText ends the open text or thinking block.
func (m *messagesStream) closeText() error {
	if !m.textOpen && !m.thinkOpen {
		return nil
	}
	m.textOpen, m.thinkOpen = false, false
	return m.sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": m.index - 1})
}

func (m *messagesStream) content(t string) error {
	if m.thinkOpen {
		if err := m.closeText(); err != nil {
			return err
		}
	}
	if !m.textOpen {
		if err := m.sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": m.index,
			"content_block": map[string]string{"type": "text", "text": ""}}); err != nil {
			return err
		}
		m.textOpen = true
		m.index++
	}
	return m.sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": m.index - 1,
		"delta": map[string]string{"type": "text_delta", "text": t}})
}

func (m *messagesStream) toolCall(tc chat.ToolCall) error {
	if err := m.closeText(); err != nil {
		return err
	}
	i := m.index
	m.index++
	if err := m.sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
		"content_block": map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}}); err != nil {
		return err
	}
	if err := m.sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
		"delta": map[string]string{"type": "input_json_delta", "partial_json": string(toolInput(tc.Arguments))}}); err != nil {
		return err
	}
	return m.sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

func (m *messagesStream) end(res *turnResult) error {
	if err := m.closeText(); err != nil {
		return err
	}
	stop, seq := anthropicStop(res)
	if err := m.sse.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": seq},
		"usage": chat.NewAnthropicUsage(res.promptTokens, res.completion, res.cached)}); err != nil {
		return err
	}
	return m.sse.event("message_stop", map[string]string{"type": "message_stop"})
}

func (m *messagesStream) fail(ae *apiError) {
	if m.sse != nil {
		m.sse.raw("error", anthropicErrorBody(ae))
	}
}
