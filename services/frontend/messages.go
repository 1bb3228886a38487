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
	"switchyard.dev/pkg/kvhash"
)

// decodeMessages reads identity and body of an Anthropic request.
func (s *Service) decodeMessages(r *http.Request, requireMax bool) (string, agentctx.AgentContext, *chat.MessagesRequest, *chat.Conversation, error) {
	tenant, agent, body, err := s.readRequest(r)
	if err != nil {
		return "", agentctx.AgentContext{}, nil, nil, err
	}
	req, err := decodeBody(s, tenant, agent, func(prev *chat.PrevBody) (*chat.MessagesRequest, *chat.PrevBody, error) {
		req, next, err := chat.DecodeMessages(body, requireMax, prev)
		if err != nil {
			return nil, nil, err
		}
		// The messages reused from the session's previous body passed this
		// check when that body came (a body that fails it is not kept for
		// reuse), so only the new ones are parsed again.
		checked := 0
		if next != nil {
			checked = next.Reused()
		}
		if err := checkAnthropicBlocks(req.Messages, checked); err != nil {
			return nil, nil, err
		}
		return req, next, nil
	})
	if err != nil {
		return "", agentctx.AgentContext{}, nil, nil, err
	}
	if err := s.checkModel(req.Model); err != nil {
		return "", agentctx.AgentContext{}, nil, nil, err
	}
	if err := checkAnthropicToolChoice(req.ToolChoice, req.Tools); err != nil {
		return "", agentctx.AgentContext{}, nil, nil, err
	}
	conv, err := req.Conversation(!s.cfg.KeepBillingHeader)
	if err != nil {
		return "", agentctx.AgentContext{}, nil, nil, err
	}
	if orphan, unanswered, found := unpairedTool(conv); found {
		if unanswered != "" {
			return "", agentctx.AgentContext{}, nil, nil, badRequestf("messages",
				"tool_use ids were found without tool_result blocks after them: %s; each tool_use block needs a tool_result block in a later message", unanswered)
		}
		return "", agentctx.AgentContext{}, nil, nil, badRequestf("messages",
			"unexpected tool_use_id found in tool_result blocks: %s; each tool_result block needs a tool_use block in an earlier message", orphan)
	}
	agent = agentctx.WithBodyFallback(agent, "", req.UserID())
	agent.InputTrigger = req.Trigger()
	return tenant, agent, req, conv, nil
}

// serveMessages is POST /v1/messages (also with ?beta=true, which Claude Code
// adds; the query string does not change the protocol).
func (s *Service) serveMessages(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	tenant, agent, req, conv, err := s.decodeMessages(r, true)
	if err != nil {
		return err
	}
	tr := &turnRequest{
		api: apiMessages, requestID: newID("msg_"), tenant: tenant, agent: agent, conv: conv,
		maxTokens: req.MaxTokens, temp: req.Temperature, topP: req.TopP, start: start, callPrefix: "toolu_",
		model: req.Model, xRequestID: r.Header.Get("x-request-id"), stops: req.StopSequences,
	}
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	if req.Stream {
		out := &messagesStream{w: w, id: tr.requestID, model: model}
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
	var content []chat.AnthropicOut
	if r := out.reason.String(); r != "" {
		sig := ""
		content = append(content, chat.AnthropicOut{Type: "thinking", Thinking: &r, Signature: &sig})
	}
	if text := out.text.String(); text != "" || len(res.toolCalls) == 0 {
		content = append(content, chat.AnthropicOut{Type: "text", Text: &text})
	}
	for _, tc := range res.toolCalls {
		content = append(content, chat.AnthropicOut{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: toolInput(tc.Arguments)})
	}
	stop, seq := anthropicStop(res)
	return writeJSON(w, http.StatusOK, chat.AnthropicResponse{
		ID: tr.requestID, Type: "message", Role: "assistant", Model: model, Content: content,
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
	tenant, _, _, conv, err := s.decodeMessages(r, false)
	if err != nil {
		return err
	}
	prompt, err := s.template.Render(conv, true)
	if err != nil {
		return badRequestf("", "%v", err)
	}
	tk, _ := chat.Preprocess(s.tok, kvhash.New(s.cfg.BlockSize, "", cacheSalt(tenant)), prompt, nil)
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

func (m *messagesStream) fail(err error) {
	ae := toAPIError(err)
	if ae.Status == 499 {
		return
	}
	m.sse.raw("error", anthropicErrorBody(ae))
}

// anthropicBlockTypes are the content block types a message may hold: the
// beta API's (anthropic-sdk-go v2.15.0 BetaContentBlockParamUnion), a
// superset of the stable one's, since Claude Code speaks the beta API (whose
// role "system" messages take a subset). pkg/chat renders text, thinking,
// tool_use and tool_result and skips the others; a type not listed is a
// 400, as Anthropic answers.
var anthropicBlockTypes = setOf("text", "image", "document", "search_result", "thinking", "redacted_thinking",
	"tool_use", "tool_result", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
	"advisor_tool_result", "code_execution_tool_result", "bash_code_execution_tool_result",
	"text_editor_code_execution_tool_result", "tool_search_tool_result", "mcp_tool_use", "mcp_tool_result",
	"container_upload", "compaction", "tool_addition", "tool_removal", "mcp_tool_listing", "fallback")

// toolResultBlockTypes are the block types of a tool_result's content (the
// same SDK's BetaToolResultBlockParamContentUnion).
var toolResultBlockTypes = setOf("text", "image", "search_result", "document", "tool_reference", "browser_state")

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// checkAnthropicBlocks rejects a block of a type Anthropic does not know in
// msgs[from:] (messages before from were checked already). Content that is
// not an array of blocks is left to pkg/chat's decoder, which reports it.
func checkAnthropicBlocks(msgs []chat.AnthropicMessage, from int) error {
	for i := from; i < len(msgs); i++ {
		param := fmt.Sprintf("messages.%d.content", i)
		blocks, ok := blockTypes(msgs[i].Content)
		if !ok {
			continue
		}
		for j, b := range blocks {
			if !anthropicBlockTypes[b.Type] {
				return badRequestf(fmt.Sprintf("%s.%d.type", param, j), "unknown content block type %q", b.Type)
			}
			inner, ok := blockTypes(b.Content)
			if b.Type != "tool_result" || !ok {
				continue
			}
			for k, ib := range inner {
				if !toolResultBlockTypes[ib.Type] {
					return badRequestf(fmt.Sprintf("%s.%d.content.%d.type", param, j, k), "unknown tool_result content block type %q", ib.Type)
				}
			}
		}
	}
	return nil
}

// typedBlock is what the type checks read of a block.
type typedBlock struct {
	Type    string          `json:"type"`
	Content json.RawMessage `json:"content"`
}

// blockTypes parses raw as an array of blocks; ok is false when it is none.
func blockTypes(raw json.RawMessage) (blocks []typedBlock, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	return blocks, json.Unmarshal(raw, &blocks) == nil
}

// checkAnthropicToolChoice: tool_choice's type is auto, any, tool or none,
// and a tool choice names a declared tool.
func checkAnthropicToolChoice(raw json.RawMessage, tools []chat.AnthropicTool) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var choice struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &choice); err != nil {
		return badRequestf("tool_choice", "tool_choice must be an object")
	}
	switch choice.Type {
	case "auto", "any", "none":
		return nil
	case "tool":
		for _, t := range tools {
			if t.Name == choice.Name {
				return nil
			}
		}
		return badRequestf("tool_choice", "tool_choice names tool %q, which tools does not declare", choice.Name)
	}
	return badRequestf("tool_choice", "tool_choice type %q is not one of auto, any, tool, none", choice.Type)
}
