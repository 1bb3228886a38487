package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"switchyard.dev/pkg/extent"
)

// ChatCompletionRequest is the body of POST /v1/chat/completions. Fields the
// mesh cannot honour (logprobs, response_format, ...) are accepted and
// ignored, as harnesses send them routinely.
type ChatCompletionRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Tools               []ChatTool      `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int64          `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	N                   *int64          `json:"n,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"`
	User                string          `json:"user,omitempty"`
	PromptCacheKey      string          `json:"prompt_cache_key,omitempty"`
	// norms are Messages normalised, when every one is (see normaliseAll):
	// Conversation hands them out without a copy.
	norms []Message
}

// StreamOptions is stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one entry of messages. Content is a string, an array of
// content parts, or null.
type ChatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content,omitempty"`
	Name             string          `json:"name,omitempty"`
	ToolCalls        []ChatToolCall  `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	// norm is the message normalised (Content's text unquoted, the role
	// mapped, the tool calls converted), once when the message was decoded
	// (nil when it does not normalise, or the message was built by hand): a
	// message a session's next body reuses (PrevBody) keeps it, so an
	// agent's 100k-token history is not unquoted and converted again every
	// turn. Conversations share it: its ToolCalls must not be changed.
	norm *Message
}

// ChatTool is one entry of tools.
type ChatTool struct {
	Type     string       `json:"type"`
	Function ChatFunction `json:"function"`
}

// ChatFunction describes a function tool.
type ChatFunction struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ChatToolCall is a call in an assistant message (request) or in a response.
type ChatToolCall struct {
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function ChatFunctionCall `json:"function"`
}

// ChatFunctionCall is the function of a ChatToolCall.
type ChatFunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// chatCompletionBody is a Chat Completions body for incremental decoding.
var chatCompletionBody = arrayBody[ChatCompletionRequest, ChatMessage]{
	field: "messages",
	decode: func(body []byte) (*ChatCompletionRequest, error) {
		var r ChatCompletionRequest
		if err := decodeJSON(body, &r); err != nil {
			return nil, err
		}
		return &r, nil
	},
	elems: func(r *ChatCompletionRequest) *[]ChatMessage { return &r.Messages },
}

// DecodeChatCompletion parses and validates a Chat Completions body. With
// prev (what the session's previous body left, or nil) it decodes only what
// the body adds to it (see PrevBody); the result is the same either way.
func DecodeChatCompletion(body []byte, prev *PrevBody) (*ChatCompletionRequest, *PrevBody, error) {
	r, next, err := decodeBody(chatCompletionBody, body, prev)
	if err != nil {
		return nil, nil, err
	}
	if err := r.validate(); err != nil {
		return nil, nil, err
	}
	// Before next is handed back (and kept for the session's next body):
	// after, other requests may read these elements.
	r.normaliseAll(prev, next)
	return r, next, nil
}

// normaliseAll normalises every message once, into one list that
// Conversation hands out whole. The messages r shares with the previous body
// keep the previous body's normalised ones, and the new ones go after them,
// in place when the previous body's list has room (claimed as decodeAfter
// claims its elements): a turn of an agent's thousand-message session
// normalises and copies only the messages it adds. A message that does not
// normalise leaves r and next without the list (Conversation then reports
// it).
func (r *ChatCompletionRequest) normaliseAll(prev, next *PrevBody) {
	keep := 0
	var base []Message
	var ext *extent.Extent
	if prev != nil && next != nil && next.reused > 0 && len(prev.norms) >= next.reused {
		keep, base, ext = next.reused, prev.norms[:next.reused], prev.normsExt
	}
	norms, ext := extent.Extend(base, ext, len(r.Messages)-keep)
	ok := true
	for i := keep; i < len(r.Messages); i++ {
		m := &r.Messages[i]
		if m.norm != nil { // a reused message, after a previous body without the list
			norms = append(norms, *m.norm)
			continue
		}
		nm, err := m.normalise(i)
		if err != nil {
			ok = false
			norms = append(norms, Message{})
			continue
		}
		norms = append(norms, nm)
		m.norm = &norms[i] // extend left room for every message: no append moves it
	}
	if !ok {
		return
	}
	r.norms = norms[:len(norms):len(norms)]
	if next != nil {
		next.norms, next.normsExt = norms, ext
	}
}

func (r *ChatCompletionRequest) validate() error {
	if len(r.Messages) == 0 {
		return badRequest("messages", "messages must be a non-empty array")
	}
	if r.N != nil && *r.N != 1 {
		return badRequest("n", "only n=1 is supported")
	}
	if err := checkSampling(r.MaxTokens, r.MaxCompletionTokens, r.Temperature, r.TopP); err != nil {
		return err
	}
	if _, err := r.Stops(); err != nil {
		return err
	}
	for i, t := range r.Tools {
		if t.Type != "" && t.Type != "function" {
			continue // other tool types cannot be rendered; ignored
		}
		if fault := toolFault(t.Function.Name, t.Function.Parameters); fault != "" {
			return openAIToolError(fmt.Sprintf("tools[%d].function", i), fault)
		}
	}
	return nil
}

// Conversation normalises the request. For a request from
// DecodeChatCompletion its messages are the list normalised then, shared
// with the session's other turns: the caller must not change them.
func (r *ChatCompletionRequest) Conversation() (*Conversation, error) {
	if r.normalised() {
		return r.conversation(&Conversation{Messages: r.norms, frozen: true}), nil
	}
	// A request built by hand, or one whose messages do not all normalise.
	c := &Conversation{Messages: make([]Message, len(r.Messages))}
	for i := range r.Messages {
		if m := &r.Messages[i]; m.norm != nil {
			c.Messages[i] = *m.norm
		} else {
			nm, err := m.normalise(i)
			if err != nil {
				return nil, err
			}
			c.Messages[i] = nm
		}
	}
	return r.conversation(c), nil
}

// normalised reports whether r.norms, which normaliseAll made when r was
// decoded, stands for r's messages: as many, and none replaced since by a
// message built outside this package (which has no norm). As before the
// list existed, a message whose fields are changed in place after decoding
// keeps its old normalised form.
func (r *ChatCompletionRequest) normalised() bool {
	if r.norms == nil || len(r.norms) != len(r.Messages) {
		return false
	}
	for i := range r.Messages {
		if r.Messages[i].norm == nil {
			return false
		}
	}
	return true
}

// conversation completes c, whose messages are r's, with r's tools.
func (r *ChatCompletionRequest) conversation(c *Conversation) *Conversation {
	for _, t := range r.Tools {
		if t.Type != "" && t.Type != "function" {
			continue
		}
		tool := Tool{Name: t.Function.Name, Parameters: t.Function.Parameters}
		if d := t.Function.Description; d != nil {
			tool.Description, tool.HasDescription = *d, true
		}
		c.Tools = append(c.Tools, tool)
	}
	if toolChoiceNone(r.ToolChoice) {
		c.Tools = nil
	}
	return c
}

// normalise is m as a Message; i is its index, for errors.
func (m *ChatMessage) normalise(i int) (Message, error) {
	text, err := contentText(m.Content, fmt.Sprintf("messages[%d].content", i))
	if err != nil {
		return Message{}, err
	}
	nm := Message{Content: text, Name: m.Name, Reasoning: m.ReasoningContent}
	switch m.Role {
	case "system", "developer":
		nm.Role = RoleSystem
	case "user":
		nm.Role = RoleUser
	case "assistant":
		nm.Role = RoleAssistant
		if len(m.ToolCalls) > 0 {
			nm.ToolCalls = make([]ToolCall, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				nm.ToolCalls[j] = ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
			}
		}
	case "tool", "function":
		nm.Role = RoleTool
		nm.ToolCallID = m.ToolCallID
	default:
		return Message{}, badRequest(fmt.Sprintf("messages[%d].role", i), "unknown role %q", m.Role)
	}
	return nm, nil
}

// CheckedConversation is Conversation for serving: first it rejects, as
// OpenAI (and vLLM) answer them, the requests that DecodeChatCompletion
// lets through because their fields are valid one by one, and that a
// template could still render. Each is a 400 naming the field.
func (r *ChatCompletionRequest) CheckedConversation() (*Conversation, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return r.Conversation()
}

func (r *ChatCompletionRequest) check() error {
	if r.StreamOptions != nil && !r.Stream {
		return badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	functions := map[string]bool{}
	for i, t := range r.Tools {
		if t.Type != "" && t.Type != "function" {
			continue
		}
		// OpenAI's documented rule for function names.
		if !validFunctionName(t.Function.Name) {
			return badRequest(fmt.Sprintf("tools[%d].function.name", i),
				"function name %q must be 1 to 64 letters, digits, '_' or '-'", t.Function.Name)
		}
		functions[t.Function.Name] = true
	}
	if err := r.checkToolChoice(functions); err != nil {
		return err
	}
	return r.checkToolMessages()
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

// checkToolChoice: tool_choice is "none", "auto", "required" or a named
// function; a named function must be declared (functions), and "required"
// needs tools (a tools member: with "tools": [] OpenAI and vLLM take
// "required" as "none").
func (r *ChatCompletionRequest) checkToolChoice(functions map[string]bool) error {
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	mode, err := openAIToolChoice(r.ToolChoice, &named)
	switch {
	case err != nil:
		return err
	case mode == "required" && r.Tools == nil:
		return badRequest("tool_choice", `tool_choice "required" is only allowed when tools are specified`)
	// Other object types (allowed_tools, custom) choose among tools
	// pkg/chat does not render; they are left to upstream's judgement.
	case named.Type == "function" && !functions[named.Function.Name]:
		return badRequest("tool_choice", "tool_choice names function %q, which tools does not declare", named.Function.Name)
	}
	return nil
}

// checkToolMessages holds the messages to unpairedTool's rule in OpenAI's
// words ("messages with role 'tool' must be a response to a preceeding
// message with 'tool_calls'"), naming the message at fault. It reads the
// wire messages, not the Conversation: it runs before Conversation decodes
// their content (a body with faults of both kinds gets this answer), and
// legacy role "function" messages, tool results there, carry no call ids
// and are not paired.
func (r *ChatCompletionRequest) checkToolMessages() error {
	at, orphan, unanswered := unpairedTool(r.Messages, true)
	switch {
	case at < 0:
		return nil
	case r.Messages[at].Role != "tool":
		return badRequest(fmt.Sprintf("messages[%d].tool_calls", at),
			"an assistant message with tool_calls must be followed by tool messages answering each; call %q has none", unanswered)
	case orphan == "":
		return badRequest(fmt.Sprintf("messages[%d].tool_call_id", at), "a tool message needs the tool_call_id of the call it answers")
	}
	return badRequest(fmt.Sprintf("messages[%d].role", at),
		"a tool message must answer a tool call of an earlier assistant message; no call has id %q", orphan)
}

// LimitTokens is the client's output cap (max_completion_tokens wins over the
// deprecated max_tokens), 0 when unset, and the field it came from, for
// errors about it (max_tokens when unset).
func (r *ChatCompletionRequest) LimitTokens() (int64, string) {
	if r.MaxCompletionTokens != nil {
		return *r.MaxCompletionTokens, "max_completion_tokens"
	}
	if r.MaxTokens != nil {
		return *r.MaxTokens, "max_tokens"
	}
	return 0, "max_tokens"
}

// LastRole is the role of the last message as the client sent it.
func (r *ChatCompletionRequest) LastRole() string {
	if len(r.Messages) == 0 {
		return ""
	}
	return r.Messages[len(r.Messages)-1].Role
}

func toolChoiceNone(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s == "none"
}

// contentPart is what the mesh reads of an OpenAI content part.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// contentText flattens OpenAI content (string, parts array or null) to text.
func contentText(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		s, err := jsonString(raw)
		if err != nil {
			return "", badRequest(param, "invalid string")
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "content must be a string or an array of content parts")
	}
	// Text parts are joined with "\n", as vLLM joins them before
	// templating (the prompt must be the engine's, byte for byte).
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			if j > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		default:
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, j), "content part type %q is not supported (text only)", p.Type)
		}
	}
	return b.String(), nil
}

func checkSampling(maxTokens, maxCompletion *int64, temperature, topP *float64) error {
	for _, mt := range []struct {
		name string
		v    *int64
	}{{"max_tokens", maxTokens}, {"max_completion_tokens", maxCompletion}} {
		if mt.v != nil && *mt.v < 1 {
			return badRequest(mt.name, "%s must be at least 1", mt.name)
		}
	}
	if temperature != nil && (*temperature < 0 || *temperature > 2) {
		return badRequest("temperature", "temperature must be between 0 and 2")
	}
	if topP != nil && (*topP < 0 || *topP > 1) {
		return badRequest("top_p", "top_p must be between 0 and 1")
	}
	return nil
}

// decodeJSON decodes one JSON value and nothing after it. json.Unmarshal,
// not a json.Decoder: the body is already in memory, and a Decoder would
// copy it while growing its buffer and scan it once more (2 ms of a 400 KB
// agent turn).
func decodeJSON(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	// A JSON value of the wrong type: encoding/json's message names Go
	// types, which mean nothing to the client; say it in JSON's terms.
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Type != nil {
		got := te.Value
		if strings.HasPrefix(got, "number ") {
			got = strings.TrimPrefix(got, "number ")
		} else {
			got = "a JSON " + got
		}
		want := jsonKindOf(te.Type.Kind())
		if te.Field == "" {
			return &RequestError{Message: fmt.Sprintf("invalid JSON body: the body must be %s, not %s", want, got)}
		}
		return &RequestError{Param: te.Field, Message: fmt.Sprintf("invalid JSON body: %s must be %s, not %s", te.Field, want, got)}
	}
	return &RequestError{Message: "invalid JSON body: " + err.Error()}
}

// jsonKindOf names the JSON value a Go kind decodes from.
func jsonKindOf(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// Response wire types of Chat Completions.

// ChatCompletion is a non-streamed answer.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *ChatUsage   `json:"usage,omitempty"`
	SystemFingerprint *string      `json:"system_fingerprint"`
}

// ChatChoice is a choice of a ChatCompletion.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      ChatOutMessage  `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// ChatOutMessage is the assistant message of a choice. Content is null when
// the model only called tools.
type ChatOutMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	// ReasoningContent is the model's thinking (vLLM's field name), absent
	// when it did not think.
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	Refusal          *string        `json:"refusal"`
	ToolCalls        []ChatToolCall `json:"tool_calls,omitempty"`
}

// ChatUsage is usage.
type ChatUsage struct {
	PromptTokens        int64                `json:"prompt_tokens"`
	CompletionTokens    int64                `json:"completion_tokens"`
	TotalTokens         int64                `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails carries cached_tokens.
type PromptTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// NewChatUsage builds usage with cached-token details.
func NewChatUsage(prompt, completion, cached int64) *ChatUsage {
	return &ChatUsage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		PromptTokensDetails: &PromptTokensDetails{CachedTokens: cached}}
}

// ChatCompletionChunk is one streamed chunk.
type ChatCompletionChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"` // "chat.completion.chunk"
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint *string           `json:"system_fingerprint"`
	Choices           []ChatChunkChoice `json:"choices"`
	// Usage is null on every chunk but the last when include_usage is set,
	// and absent otherwise, as OpenAI does.
	Usage json.RawMessage `json:"usage,omitempty"`
}

// ChatChunkChoice is a choice of a chunk.
type ChatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChatDelta       `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChatDelta is the delta of a chunk choice.
type ChatDelta struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []ChatToolCall `json:"tool_calls,omitempty"`
}
