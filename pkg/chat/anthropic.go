package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"switchyard.dev/pkg/agentctx"

	"switchyard.dev/pkg/extent"
)

// BillingHeaderPrefix starts the system block Claude Code adds to every
// request with a per-request suffix. Left in the prompt it changes the very
// first tokens of every turn, so no turn would ever hit the prefix cache.
const BillingHeaderPrefix = "x-anthropic-billing-header:"

// MessagesRequest is the body of POST /v1/messages (Anthropic Messages).
// Fields the mesh cannot honour (thinking, metadata, context_management, ...)
// are accepted and ignored.
type MessagesRequest struct {
	Model         string             `json:"model"`
	Messages      []AnthropicMessage `json:"messages"`
	System        json.RawMessage    `json:"system,omitempty"` // string or text blocks
	Tools         []AnthropicTool    `json:"tools,omitempty"`
	ToolChoice    json.RawMessage    `json:"tool_choice,omitempty"`
	MaxTokens     int64              `json:"max_tokens"`
	Stream        bool               `json:"stream,omitempty"`
	Temperature   *float64           `json:"temperature,omitempty"`
	TopP          *float64           `json:"top_p,omitempty"`
	StopSequences []string           `json:"stop_sequences,omitempty"`
	Metadata      json.RawMessage    `json:"metadata,omitempty"`
	// norms are the conversation's messages as Conversation(true) gives
	// them, the system message first when there is one (normSystem), made
	// when the body was decoded and shared with the session's other turns
	// (see normaliseAll).
	norms      []Message
	normSystem bool
	normCount  int // len(Messages) then
}

// UserID is metadata.user_id, "" when absent or not a string.
func (r *MessagesRequest) UserID() string {
	var md struct {
		UserID json.RawMessage `json:"user_id"`
	}
	if json.Unmarshal(r.Metadata, &md) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(md.UserID, &s) != nil {
		return ""
	}
	return s
}

// AnthropicMessage is one message; Content is a string or content blocks.
// Role "system" in the middle of messages is what Claude Code sends for
// reminders; it is kept as a system turn.
type AnthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// blocks is Content parsed when the body was decoded (parsed says it
	// parsed), so that neither Trigger nor Conversation parses it again,
	// nor does a session's next body, which reuses the message.
	blocks []anthropicBlock
	parsed bool
	// norm is the message as the Messages it normalises to (its tool
	// results and its text), made then too when it normalises (normalised
	// says so): a Claude Code session resends a thousand of them a turn.
	// Conversations share their ToolCalls, which must not be changed.
	norm       []Message
	normalised bool
}

// contentBlocks is the message's content as blocks.
func (m *AnthropicMessage) contentBlocks(param string) ([]anthropicBlock, error) {
	if m.parsed {
		return m.blocks, nil
	}
	return anthropicBlocks(m.Content, param)
}

// AnthropicTool is one tool. Server tools (web_search, ...) have a type and
// no input_schema; they cannot run here and are ignored.
type AnthropicTool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// server reports whether t is a server tool: typed, neither custom nor
// with an input_schema.
func (t *AnthropicTool) server() bool {
	return len(t.InputSchema) == 0 && t.Type != "" && t.Type != "custom"
}

// anthropicBlock is any content block; fields by type.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"` // tool_result: string or blocks
	IsError   bool            `json:"is_error,omitempty"`
}

// messagesBody is an Anthropic Messages body for incremental decoding.
var messagesBody = arrayBody[MessagesRequest, AnthropicMessage]{
	field: "messages",
	decode: func(body []byte) (*MessagesRequest, error) {
		var r MessagesRequest
		if err := decodeJSON(body, &r); err != nil {
			return nil, err
		}
		for i := range r.Messages {
			m := &r.Messages[i]
			if blocks, err := anthropicBlocks(m.Content, ""); err == nil {
				m.blocks, m.parsed = blocks, true
			}
			if norm, err := m.normalise(i); err == nil {
				m.norm, m.normalised = norm, true
			}
		}
		return &r, nil
	},
	elems: func(r *MessagesRequest) *[]AnthropicMessage { return &r.Messages },
}

// maxStopSequences bounds stop_sequences, which Anthropic documents no limit
// for (OpenAI's stop takes 4). The answer's StopMatcher looks for every
// sequence at every token, about 40 ns a sequence, so 256 keeps that near
// 10 µs a token while staying far above what clients send (a handful).
const maxStopSequences = 256

// DecodeMessages parses and validates an Anthropic Messages body.
// requireMaxTokens is false for count_tokens, whose body has none. With prev
// (what the session's previous body left, or nil) it decodes only what the
// body adds to it (see PrevBody); the result is the same either way.
func DecodeMessages(body []byte, requireMaxTokens bool, prev *PrevBody) (*MessagesRequest, *PrevBody, error) {
	r, next, err := decodeBody(messagesBody, body, prev)
	if err != nil {
		return nil, nil, err
	}
	if len(r.Messages) == 0 {
		return nil, nil, badRequest("messages", "messages: at least one message is required")
	}
	if requireMaxTokens && r.MaxTokens < 1 {
		return nil, nil, badRequest("max_tokens", "max_tokens: must be at least 1")
	}
	if err := checkSampling(nil, nil, nil, r.TopP); err != nil {
		return nil, nil, err
	}
	if r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1) {
		return nil, nil, badRequest("temperature", "temperature: must be between 0 and 1")
	}
	if len(r.StopSequences) > maxStopSequences {
		return nil, nil, badRequest("stop_sequences", "stop_sequences: at most %d stop sequences", maxStopSequences)
	}
	for _, s := range r.StopSequences {
		// Anthropic's own answer (seen); here an empty sequence would be
		// ignored and a blank one stop the answer at its first space.
		if strings.TrimSpace(s) == "" {
			return nil, nil, badRequest("stop_sequences", "stop_sequences: each stop sequence must contain non-whitespace")
		}
	}
	if err := r.checkTools(); err != nil {
		return nil, nil, err
	}
	// The messages reused from the session's previous body passed this
	// check when that body came: a body that fails it leaves nothing for
	// the next to reuse.
	checked := 0
	if next != nil {
		checked = next.Reused()
	}
	if err := r.checkBlockTypes(checked); err != nil {
		return nil, nil, err
	}
	// Before next is handed back: after, other requests may read it.
	r.normaliseAll(prev, next)
	return r, next, nil
}

// normaliseAll puts every message's normalised form, after the system
// message with Claude Code's billing header stripped (the frontend's
// default), into one list that Conversation hands out whole. The messages r
// shares with the previous body keep their place in the previous body's
// list, and the new ones go after them, in place when that list has room
// (claimed as decodeAfter claims its elements), so that a turn of a Claude
// Code session of a thousand messages copies only what it adds. A new
// system message makes a new list. A message or system that does not
// normalise leaves r and next without one (Conversation then reports it).
func (r *MessagesRequest) normaliseAll(prev, next *PrevBody) {
	sys, hasSys, err := r.system(true)
	if err != nil {
		return
	}
	for i := range r.Messages {
		if !r.Messages[i].normalised {
			return
		}
	}
	keep, head := 0, 0
	var (
		list      []Message
		ends      []int // ends[i] is where message i's forms end in list
		listExt   *extent.Extent
		endsExt   *extent.Extent
		reusedSys = prev != nil && prev.normSystem == hasSys && (!hasSys || len(prev.norms) > 0 && sameMessage(&prev.norms[0], &sys))
	)
	if next != nil && next.reused > 0 && reusedSys && len(prev.normEnds) >= next.reused {
		keep = next.reused
		// Claude Code moves its cache_control marker to the newest message
		// at every turn, so the previous body's last message is decoded
		// again: the same forms, which keep their place (and the list its
		// room to append in place).
		for keep < len(prev.normEnds) && keep < len(r.Messages) &&
			sameForms(r.Messages[keep].norm, prev.norms[prev.normEnds[keep-1]:prev.normEnds[keep]]) {
			keep++
		}
		list, listExt = prev.norms[:prev.normEnds[keep-1]], prev.normsExt
		ends, endsExt = prev.normEnds[:keep], prev.normEndsExt
	} else if hasSys {
		head = 1
	}
	add := head
	for i := keep; i < len(r.Messages); i++ {
		add += len(r.Messages[i].norm)
	}
	list, listExt = extent.Extend(list, listExt, add)
	ends, endsExt = extent.Extend(ends, endsExt, len(r.Messages)-keep)
	if head == 1 {
		list = append(list, sys)
	}
	for i := keep; i < len(r.Messages); i++ {
		list = append(list, r.Messages[i].norm...)
		ends = append(ends, len(list))
	}
	r.norms, r.normSystem, r.normCount = list[:len(list):len(list)], hasSys, len(r.Messages)
	if next != nil {
		next.norms, next.normsExt, next.normEnds, next.normEndsExt, next.normSystem = list, listExt, ends, endsExt, hasSys
	}
}

// sameForms reports whether a and b are the same normalised messages.
func sameForms(a, b []Message) bool {
	return slices.EqualFunc(a, b, func(x, y Message) bool { return sameMessage(&x, &y) })
}

// system is the conversation's system message, if it has one: the system
// blocks' text, Claude Code's billing header dropped with stripBilling.
func (r *MessagesRequest) system(stripBilling bool) (Message, bool, error) {
	sys, err := anthropicBlocks(r.System, "system")
	if err != nil {
		return Message{}, false, err
	}
	var system []string
	for _, b := range sys {
		if b.Type != "text" {
			continue
		}
		text := b.Text
		if stripBilling && strings.HasPrefix(text, BillingHeaderPrefix) {
			// The header is one line; whatever follows it (a system
			// given as one string) is the client's own prompt.
			_, text, _ = strings.Cut(text, "\n")
			if text == "" {
				continue
			}
		}
		system = append(system, text)
	}
	if len(system) == 0 {
		return Message{}, false, nil
	}
	return Message{Role: RoleSystem, Content: strings.Join(system, "\n")}, true, nil
}

// anthropicBlockTypes are the content block types a message may hold: the
// beta API's (anthropic-sdk-go v2.15.0 BetaContentBlockParamUnion), a
// superset of the stable one's, since Claude Code speaks the beta API (whose
// role "system" messages take a subset). Conversation renders text,
// thinking, tool_use and tool_result and skips the others; a type not
// listed is a 400, as Anthropic answers.
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

// checkTools rejects, in Anthropic's words, a tool other than a server
// tool that toolFault faults, which the prompt would otherwise drop or
// render with a schema that is not one.
func (r *MessagesRequest) checkTools() error {
	for i := range r.Tools {
		t := &r.Tools[i]
		if t.server() {
			continue
		}
		switch toolFault(t.Name, t.InputSchema) {
		case "name":
			return badRequest(fmt.Sprintf("tools.%d.name", i), "Field required")
		case "schema":
			return badRequest(fmt.Sprintf("tools.%d.input_schema", i), "Input should be a valid dictionary")
		}
	}
	return nil
}

// checkBlockTypes rejects a block of a type Anthropic does not know in the
// messages from the first'th on. Content that is not an array of blocks is
// left to Conversation, which reports it.
func (r *MessagesRequest) checkBlockTypes(first int) error {
	for i := first; i < len(r.Messages); i++ {
		m := &r.Messages[i]
		blocks, ok := m.blocks, m.parsed
		if !ok {
			// Blocks with a field of the wrong type, which Conversation
			// rejects: an unknown block type is the error to report.
			blocks, ok = typedBlocks(m.Content)
		}
		if !ok {
			continue
		}
		param := fmt.Sprintf("messages.%d.content", i)
		for j, b := range blocks {
			if !anthropicBlockTypes[b.Type] {
				return badRequest(fmt.Sprintf("%s.%d.type", param, j), "unknown content block type %q", b.Type)
			}
			if m.parsed {
				if field := missingToolField(&b); field != "" {
					return badRequest(fmt.Sprintf("%s.%d.%s", param, j, field), "Field required")
				}
			}
			if b.Type != "tool_result" {
				continue
			}
			inner, _ := typedBlocks(b.Content)
			for k, ib := range inner {
				if !toolResultBlockTypes[ib.Type] {
					return badRequest(fmt.Sprintf("%s.%d.content.%d.type", param, j, k), "unknown tool_result content block type %q", ib.Type)
				}
			}
		}
	}
	return nil
}

// missingToolField is the field a tool_use or tool_result block lacks (or
// holds empty) that pairs it with its other half, "" when none: an id
// Anthropic requires, and without which two blocks would pair by their
// empty ids.
func missingToolField(b *anthropicBlock) string {
	switch {
	case b.Type == "tool_use" && b.ID == "":
		return "id"
	case b.Type == "tool_use" && b.Name == "":
		return "name"
	case b.Type == "tool_result" && b.ToolUseID == "":
		return "tool_use_id"
	}
	return ""
}

// typedBlocks parses raw as an array of blocks, reading only their type
// and content (so a block with any other field of the wrong type still
// parses); ok is false when raw is no such array.
func typedBlocks(raw json.RawMessage) (blocks []anthropicBlock, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var typed []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &typed) != nil {
		return nil, false
	}
	blocks = make([]anthropicBlock, len(typed))
	for i, t := range typed {
		blocks[i] = anthropicBlock{Type: t.Type, Content: t.Content}
	}
	return blocks, true
}

func anthropicBlocks(raw json.RawMessage, param string) ([]anthropicBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		s, err := jsonString(raw)
		if err != nil {
			return nil, badRequest(param, "invalid string")
		}
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badRequest(param, "content must be a string or an array of content blocks")
	}
	return blocks, nil
}

// blocksText concatenates the text blocks (tool_result content).
func blocksText(raw json.RawMessage, param string) (string, error) {
	blocks, err := anthropicBlocks(raw, param)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String(), nil
}

// Conversation normalises the request; with stripBilling, Claude Code's
// billing-header system block is dropped. The caller must not change the
// messages (Prepare keeps them for the session's next turn).
func (r *MessagesRequest) Conversation(stripBilling bool) (*Conversation, error) {
	// The list made at decoding has the system message without the billing
	// header: with stripping it is the conversation, without it only when
	// there was no header (the system is not parsed again in the first case).
	if stripBilling && r.shares() {
		return r.conversation(&Conversation{Messages: r.norms, frozen: true}), nil
	}
	sys, hasSys, err := r.system(stripBilling)
	if err != nil {
		return nil, err
	}
	if r.shares() && r.normSystem == hasSys && (!hasSys || sameMessage(&r.norms[0], &sys)) {
		return r.conversation(&Conversation{Messages: r.norms, frozen: true}), nil
	}
	c := &Conversation{}
	n := 1 // room for the whole list at once: growing it by appends copied it about twice
	for i := range r.Messages {
		n += max(1, len(r.Messages[i].norm))
	}
	c.Messages = make([]Message, 0, n)
	if hasSys {
		c.Messages = append(c.Messages, sys)
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		norm := m.norm
		if !m.normalised {
			var err error
			if norm, err = m.normalise(i); err != nil {
				return nil, err
			}
		}
		c.Messages = append(c.Messages, norm...)
	}
	// A list of its own, which no one else holds or appends to: Prepare
	// may keep it for the session's next turn without a copy.
	c.Messages, c.frozen = c.Messages[:len(c.Messages):len(c.Messages)], true
	return r.conversation(c), nil
}

// shares reports whether r.norms, made when r was decoded, still stands for
// r's messages: as many, none replaced since by one built outside this
// package. (A message whose fields are changed in place keeps its old
// forms, as it did before the list existed.)
func (r *MessagesRequest) shares() bool {
	if r.norms == nil || r.normCount != len(r.Messages) {
		return false
	}
	for i := range r.Messages {
		if !r.Messages[i].normalised {
			return false
		}
	}
	return true
}

// conversation completes c, whose messages are r's, with r's tools.
func (r *MessagesRequest) conversation(c *Conversation) *Conversation {
	for _, t := range r.Tools {
		if t.server() {
			continue
		}
		if t.Name == "" {
			continue // only in a request built by hand: DecodeMessages rejects it
		}
		c.Tools = append(c.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	var choice struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(r.ToolChoice, &choice) == nil && choice.Type == "none" {
		c.Tools = nil
	}
	return c
}

// normalise is m as the Messages it stands for; i is its index, for errors
// (named only when there is one: formatting every message's parameter name
// at every turn was a third of a Claude Code turn's preprocessing).
func (m *AnthropicMessage) normalise(i int) ([]Message, error) {
	param := func() string { return fmt.Sprintf("messages.%d.content", i) }
	blocks := m.blocks
	if !m.parsed {
		var err error
		if blocks, err = anthropicBlocks(m.Content, param()); err != nil {
			return nil, err
		}
	}
	var out []Message
	switch m.Role {
	case "system":
		var texts []string
		for _, bl := range blocks {
			if bl.Type == "text" {
				texts = append(texts, bl.Text)
			}
		}
		out = append(out, Message{Role: RoleSystem, Content: strings.Join(texts, "\n")})
	case "assistant":
		msg := Message{Role: RoleAssistant}
		// Built, not concatenated with +=, which copied all the text so
		// far again at every block: a message of many small blocks took
		// time quadratic in their number (1.4 MB of them, 3 s to decode).
		var content, reasoning strings.Builder
		for _, bl := range blocks {
			switch bl.Type {
			case "text":
				content.WriteString(bl.Text)
			case "thinking":
				reasoning.WriteString(bl.Thinking)
			case "tool_use":
				args := strings.TrimSpace(string(bl.Input))
				if args == "" || args == "null" {
					args = "{}"
				}
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: bl.ID, Name: bl.Name, Arguments: args})
			}
		}
		msg.Content, msg.Reasoning = content.String(), reasoning.String()
		out = append(out, msg)
	case "user":
		// Tool results come first in a user turn (the API requires it);
		// any text after them is the user's own message.
		// Text blocks are joined with "\n", as an engine joins the text
		// parts of a message before templating.
		var texts []string
		for j, bl := range blocks {
			switch bl.Type {
			case "tool_result":
				res, err := blocksText(bl.Content, "")
				if err != nil { // again, to name the block
					_, err = blocksText(bl.Content, fmt.Sprintf("%s.%d.content", param(), j))
					return nil, err
				}
				out = append(out, Message{Role: RoleTool, Content: res, ToolCallID: bl.ToolUseID})
			case "text":
				texts = append(texts, bl.Text)
			}
		}
		if len(texts) > 0 || len(blocks) == 0 {
			out = append(out, Message{Role: RoleUser, Content: strings.Join(texts, "\n")})
		}
	default:
		return nil, badRequest(fmt.Sprintf("messages.%d.role", i), "unknown role %q", m.Role)
	}
	return out, nil
}

// CheckedConversation is Conversation for serving: it also rejects, as
// Anthropic answers them, the requests whose tool_choice or tool_use and
// tool_result blocks break the rules of the tools they declare
// (checkToolChoice, unpairedTool), which a template could still render.
func (r *MessagesRequest) CheckedConversation(stripBilling bool) (*Conversation, error) {
	if err := r.checkToolChoice(); err != nil {
		return nil, err
	}
	c, err := r.Conversation(stripBilling)
	if err != nil {
		return nil, err
	}
	if at, orphan, unanswered := unpairedTool(c.Messages, false); at >= 0 {
		if unanswered != "" {
			return nil, badRequest("messages",
				"tool_use ids were found without tool_result blocks after them: %s; each tool_use block needs a tool_result block in a later message", unanswered)
		}
		return nil, badRequest("messages",
			"unexpected tool_use_id found in tool_result blocks: %s; each tool_result block needs a tool_use block in an earlier message", orphan)
	}
	return c, nil
}

// checkToolChoice: tool_choice's type is auto, any, tool or none, and a
// tool choice names a declared tool.
func (r *MessagesRequest) checkToolChoice() error {
	raw := bytes.TrimSpace(r.ToolChoice)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var choice struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &choice); err != nil {
		return badRequest("tool_choice", "tool_choice must be an object")
	}
	switch choice.Type {
	case "auto", "any", "none":
		return nil
	case "tool":
		for _, t := range r.Tools {
			if t.Name == choice.Name {
				return nil
			}
		}
		return badRequest("tool_choice", "tool_choice names tool %q, which tools does not declare", choice.Name)
	}
	return badRequest("tool_choice", "tool_choice type %q is not one of auto, any, tool, none", choice.Type)
}

// Trigger classifies the request (see agentctx.TriggerForAnthropic).
func (r *MessagesRequest) Trigger() agentctx.InputTrigger {
	msgs := make([]agentctx.AnthropicMessage, len(r.Messages))
	for i := range r.Messages {
		m := &r.Messages[i]
		msgs[i].Role = m.Role
		if blocks, err := m.contentBlocks(""); err == nil {
			for _, b := range blocks {
				if b.Type == "tool_result" {
					msgs[i].HasToolResult = true
				}
			}
		}
	}
	return agentctx.TriggerForAnthropic(msgs)
}

// Response wire types of Anthropic Messages.

// AnthropicResponse is a message (non-streamed answer, and message_start).
type AnthropicResponse struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []AnthropicOut `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        AnthropicUsage `json:"usage"`
}

// AnthropicOut is an output content block.
type AnthropicOut struct {
	Type string  `json:"type"`
	Text *string `json:"text,omitempty"`
	// Thinking and Signature are a thinking block's (the signature is
	// empty: there is no Anthropic key to sign with).
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// AnthropicUsage is usage. Anthropic counts input_tokens without the cached
// ones: the whole prompt is input + cache_creation + cache_read.
type AnthropicUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// NewAnthropicUsage splits a prompt into uncached and cached input.
func NewAnthropicUsage(prompt, completion, cached int64) AnthropicUsage {
	return AnthropicUsage{InputTokens: prompt - cached, CacheReadInputTokens: cached, OutputTokens: completion}
}

// StopReason maps an OpenAI-style finish reason to Anthropic's.
func StopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls":
		return "tool_use"
	}
	return "end_turn"
}
