package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"switchyard.dev/pkg/agentctx"
)

// ResponsesRequest is the body of POST /v1/responses (OpenAI Responses).
// What Codex and OpenCode send beyond what the mesh uses (store, include,
// prompt_cache_key, reasoning, text, client_metadata, server tools) is
// accepted and ignored.
type ResponsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"` // string or items
	Instructions       string          `json:"instructions,omitempty"`
	Tools              []ResponsesTool `json:"tools,omitempty"`
	ToolChoice         json.RawMessage `json:"tool_choice,omitempty"`
	Stream             bool            `json:"stream,omitempty"`
	MaxOutputTokens    *int64          `json:"max_output_tokens,omitempty"`
	Temperature        *float64        `json:"temperature,omitempty"`
	TopP               *float64        `json:"top_p,omitempty"`
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls,omitempty"`
	Store              *bool           `json:"store,omitempty"`
	PromptCacheKey     string          `json:"prompt_cache_key,omitempty"`
	Metadata           json.RawMessage `json:"metadata,omitempty"`

	// Input decoded when the body was decoded, so that neither Trigger
	// nor Conversation decodes it again, nor does a session's next body,
	// which reuses the items: the items (a string input is one user
	// message), whether input was a string, and the error to report if
	// it was neither a string nor items.
	items     []responsesItem
	textInput bool
	itemsErr  error
}

// ResponsesTool is a tool: function, custom (freeform text input), namespace
// (a group of tools) or a server tool (web_search, ...; ignored).
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Tools       []ResponsesTool `json:"tools,omitempty"` // namespace
}

// responsesItem is any input item; fields by type.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Input     string          `json:"input,omitempty"`  // custom_tool_call
	Output    json.RawMessage `json:"output,omitempty"` // *_output: string or parts
	Tools     []ResponsesTool `json:"tools,omitempty"`  // additional_tools
}

// ToolKinds names each tool's kind ("function" or "custom"), to answer a
// call in the item type the client expects.
type ToolKinds map[string]string

// responsesBody is a Responses body for incremental decoding.
var responsesBody = arrayBody[ResponsesRequest, responsesItem]{
	field: "input",
	decode: func(body []byte) (*ResponsesRequest, error) {
		var r ResponsesRequest
		if err := decodeJSON(body, &r); err != nil {
			return nil, err
		}
		r.decodeInput()
		return &r, nil
	},
	elems: func(r *ResponsesRequest) *[]responsesItem {
		if r.textInput || r.itemsErr != nil {
			return nil
		}
		return &r.items
	},
	setArray: func(r *ResponsesRequest, raw []byte) { r.Input = raw },
}

// DecodeResponses parses and validates a Responses body. With prev (what
// the session's previous body left, or nil) it decodes only what the body
// adds to it (see PrevBody); the result is the same either way.
func DecodeResponses(body []byte, prev *PrevBody) (*ResponsesRequest, *PrevBody, error) {
	r, next, err := decodeBody(responsesBody, body, prev)
	if err != nil {
		return nil, nil, err
	}
	// No items is no input however the array is spelled ("[ ]", "[\n]"):
	// with instructions, it would render a prompt of the system turn alone.
	in := bytes.TrimSpace(r.Input)
	if len(in) == 0 || string(in) == "null" || string(in) == `""` || r.itemsErr == nil && len(r.items) == 0 {
		return nil, nil, badRequest("input", "input is required")
	}
	if r.PreviousResponseID != "" {
		return nil, nil, badRequest("previous_response_id", "previous_response_id is not supported: responses are not stored; send the whole conversation in input")
	}
	if err := checkSampling(nil, nil, r.Temperature, r.TopP); err != nil {
		return nil, nil, err
	}
	return r, next, nil
}

// decodeInput decodes Input into items.
func (r *ResponsesRequest) decodeInput() {
	in := bytes.TrimSpace(r.Input)
	switch {
	case len(in) == 0:
	case in[0] == '"':
		if _, err := jsonString(in); err != nil {
			r.itemsErr = badRequest("input", "invalid string")
			return
		}
		r.items, r.textInput = []responsesItem{{Type: "message", Role: "user", Content: in}}, true
	default:
		if err := json.Unmarshal(in, &r.items); err != nil {
			r.items, r.itemsErr = nil, badRequest("input", "input must be a string or an array of items")
		}
	}
}

func (r *ResponsesRequest) decodedItems() ([]responsesItem, bool, error) {
	return r.items, r.textInput, r.itemsErr
}

// Trigger classifies the request (see agentctx.TriggerForResponses).
func (r *ResponsesRequest) Trigger() agentctx.InputTrigger {
	items, text, err := r.decodedItems()
	if err != nil {
		return agentctx.TriggerOther
	}
	ri := make([]agentctx.ResponsesItem, len(items))
	for i, it := range items {
		ri[i] = agentctx.ResponsesItem{Type: it.Type, Role: it.Role}
	}
	return agentctx.TriggerForResponses(text, ri)
}

// Conversation normalises the request and reports each tool's kind.
func (r *ResponsesRequest) Conversation() (*Conversation, ToolKinds, error) {
	items, _, err := r.decodedItems()
	if err != nil {
		return nil, nil, err
	}
	c := &Conversation{}
	kinds := ToolKinds{}
	// addTools adds the tools ts, at param at, rejecting one that toolFault
	// faults.
	var addTools func(ts []ResponsesTool, at string) error
	addTools = func(ts []ResponsesTool, at string) error {
		for i, t := range ts {
			switch t.Type {
			case "function", "custom":
				if fault := toolFault(t.Name, t.Parameters); fault != "" {
					return openAIToolError(fmt.Sprintf("%s[%d]", at, i), fault)
				}
				if kinds[t.Name] != "" {
					continue
				}
				kinds[t.Name] = t.Type
				params := t.Parameters
				if t.Type == "custom" {
					params = json.RawMessage(`{"type":"string","description":"freeform input"}`)
				}
				c.Tools = append(c.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: params})
			case "namespace":
				if err := addTools(t.Tools, fmt.Sprintf("%s[%d].tools", at, i)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := addTools(r.Tools, "tools"); err != nil {
		return nil, nil, err
	}
	if r.Instructions != "" {
		c.Messages = append(c.Messages, Message{Role: RoleSystem, Content: r.Instructions})
	}
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "message", "":
			text, err := contentText(it.Content, param+".content")
			if err != nil {
				return nil, nil, err
			}
			switch it.Role {
			case "system", "developer":
				c.Messages = append(c.Messages, Message{Role: RoleSystem, Content: text})
			case "user":
				c.Messages = append(c.Messages, Message{Role: RoleUser, Content: text})
			case "assistant":
				c.Messages = append(c.Messages, Message{Role: RoleAssistant, Content: text})
			default:
				return nil, nil, badRequest(param+".role", "unknown role %q", it.Role)
			}
		case "function_call", "custom_tool_call":
			args := it.Arguments
			if it.Type == "custom_tool_call" {
				args = it.Input
			}
			tc := ToolCall{ID: it.CallID, Name: it.Name, Arguments: args}
			// Calls join the assistant message right before them.
			if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == RoleAssistant {
				c.Messages[n-1].ToolCalls = append(c.Messages[n-1].ToolCalls, tc)
			} else {
				c.Messages = append(c.Messages, Message{Role: RoleAssistant, ToolCalls: []ToolCall{tc}})
			}
		case "function_call_output", "custom_tool_call_output":
			out, err := outputText(it.Output, param+".output")
			if err != nil {
				return nil, nil, err
			}
			c.Messages = append(c.Messages, Message{Role: RoleTool, Content: out, ToolCallID: it.CallID})
		case "additional_tools":
			if err := addTools(it.Tools, param+".tools"); err != nil {
				return nil, nil, err
			}
		default:
			// reasoning, web_search_call, item_reference, ...: nothing to render.
		}
	}
	if len(c.Messages) == 0 {
		return nil, nil, badRequest("input", "input has no message")
	}
	if toolChoiceNone(r.ToolChoice) {
		c.Tools = nil
	}
	return c, kinds, nil
}

// CheckedConversation is Conversation for serving: it also rejects, as
// OpenAI answers them, the requests whose tool_choice or tool calls and
// outputs break the rules of the tools they declare (checkToolChoice,
// unpairedTool), which a template could still render.
func (r *ResponsesRequest) CheckedConversation() (*Conversation, ToolKinds, error) {
	c, kinds, err := r.Conversation()
	if err != nil {
		return nil, nil, err
	}
	if err := r.checkToolChoice(kinds); err != nil {
		return nil, nil, err
	}
	if at, orphan, unanswered := unpairedTool(c.Messages, false); at >= 0 {
		if unanswered != "" {
			return nil, nil, badRequest("input", "no tool output found for function call %s", unanswered)
		}
		return nil, nil, badRequest("input", "no tool call found for function call output with call_id %s", orphan)
	}
	return c, kinds, nil
}

// checkToolChoice: tool_choice is "none", "auto", "required" or an
// object, and a function or custom choice names a declared tool of that
// kind (kinds: the tools the request declares, namespaces included). Other
// objects (allowed_tools, hosted and MCP tools) are not checked.
func (r *ResponsesRequest) checkToolChoice(kinds ToolKinds) error {
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if _, err := openAIToolChoice(r.ToolChoice, &named); err != nil {
		return err
	}
	if (named.Type == "function" || named.Type == "custom") && kinds[named.Name] != named.Type {
		return badRequest("tool_choice", "tool_choice names %s tool %q, which tools does not declare", named.Type, named.Name)
	}
	return nil
}

// outputText flattens a tool output (string or content parts).
func outputText(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", badRequest(param, "output must be a string or an array of content parts")
		}
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String(), nil
	}
	return contentText(raw, param)
}

// LimitTokens is max_output_tokens, 0 when unset.
func (r *ResponsesRequest) LimitTokens() int64 {
	if r.MaxOutputTokens != nil {
		return *r.MaxOutputTokens
	}
	return 0
}

// ResponsesUsage is the usage of a response.
type ResponsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// NewResponsesUsage builds usage with cached-token details.
func NewResponsesUsage(prompt, completion, cached int64) *ResponsesUsage {
	u := &ResponsesUsage{InputTokens: prompt, OutputTokens: completion, TotalTokens: prompt + completion}
	u.InputTokensDetails.CachedTokens = cached
	return u
}
