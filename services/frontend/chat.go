package frontend

import (
	"encoding/json"
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
