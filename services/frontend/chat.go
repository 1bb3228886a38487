package frontend

import (
	"encoding/json"
	"net/http"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/chat"
)

// serveChat is POST /v1/chat/completions.
func (s *Service) serveChat(w http.ResponseWriter, r *http.Request) error {
	tr, req, err := readRequest(s, r, apiChat, chat.DecodeChatCompletion)
	if err != nil {
		return err
	}
	if err := s.checkModel(req.Model); err != nil {
		return err
	}
	if tr.conv, err = req.CheckedConversation(); err != nil {
		return err
	}
	if tr.stops, err = req.Stops(); err != nil {
		return err
	}
	tr.agent = agentctx.WithBodyFallback(tr.agent, req.PromptCacheKey, "")
	tr.agent.InputTrigger = agentctx.TriggerForChat(req.LastRole())
	tr.requestID, tr.model = newID("chatcmpl-"), req.Model
	tr.maxTokens, tr.maxTokensParam = req.LimitTokens()
	tr.temp, tr.topP, tr.seed = req.Temperature, req.TopP, req.Seed
	model := s.answerModel(req.Model)
	if req.Stream {
		return s.reply(r.Context(), tr, &chatStream{w: w, id: tr.requestID, model: model, created: s.now(),
			includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage})
	}
	return s.reply(r.Context(), tr, &chatCollect{collected: collected{w: w}, id: tr.requestID, model: model, now: s.now})
}

// chatCollect writes a non-streamed answer.
type chatCollect struct {
	collected
	id, model string
	now       func() int64
}

func (c *chatCollect) end(res *turnResult) error {
	msg := chat.ChatOutMessage{Role: "assistant"}
	if r := c.reason.String(); r != "" {
		msg.ReasoningContent = &r
	}
	if text := c.text.String(); text != "" || len(res.toolCalls) == 0 {
		msg.Content = &text
	}
	for _, tc := range res.toolCalls {
		msg.ToolCalls = append(msg.ToolCalls, chat.ChatToolCall{ID: tc.ID, Type: "function",
			Function: chat.ChatFunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return writeJSON(c.w, http.StatusOK, chat.ChatCompletion{
		ID: c.id, Object: "chat.completion", Created: c.now(), Model: c.model,
		Choices: []chat.ChatChoice{{Index: 0, Message: msg, FinishReason: res.finish}},
		Usage:   chat.NewChatUsage(res.promptTokens, res.completion, res.cached),
	})
}

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

// header and streamed make the answer headed.
func (c *chatStream) header() http.Header { return c.w.Header() }
func (c *chatStream) streamed() bool      { return true }

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
func (c *chatStream) fail(ae *apiError) {
	if c.sse != nil {
		c.sse.raw("", openAIErrorBody(ae))
	}
}
