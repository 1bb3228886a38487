package chat

import "encoding/json"

// Roles of a normalised Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Conversation is a request's prompt in API-independent form.
type Conversation struct {
	Messages []Message
	Tools    []Tool
	// frozen says Messages is a view of a list whose elements nothing
	// changes and within whose length nothing appends: a decoded request's
	// normalised messages, shared with the session's other turns (which
	// append past its length), or a list made for this Conversation alone.
	// Prepare keeps such a list without copying it.
	frozen bool
}

// Message is one turn. Content is plain text: APIs with content parts
// concatenate their text parts (non-text parts are not supported by the
// text-only engines behind the mesh and are rejected by the decoders).
type Message struct {
	Role    string
	Content string
	// Reasoning is the assistant's thinking text, when the client sends it back.
	Reasoning string
	// ToolCalls are the calls an assistant message made.
	ToolCalls []ToolCall
	// ToolCallID names the call a tool message answers; Name is its tool.
	ToolCallID string
	Name       string
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// HasDescription says the client sent a description even if it is
	// empty: engines show an absent description as null and an empty one
	// as "" (vLLM's tool model), so the two render differently.
	HasDescription bool
	// Parameters is the JSON schema of the arguments (raw JSON, may be nil).
	Parameters json.RawMessage
}

// ToolCall is one call of a tool. Arguments is a JSON object as text.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// HasRole reports whether any message has role (an assistant turn: the
// conversation is not at its first turn).
func (c *Conversation) HasRole(role string) bool {
	for i := range c.Messages {
		if c.Messages[i].Role == role {
			return true
		}
	}
	return false
}

// LastRole is the role of the last message ("" for none).
func (c *Conversation) LastRole() string {
	if len(c.Messages) == 0 {
		return ""
	}
	return c.Messages[len(c.Messages)-1].Role
}
