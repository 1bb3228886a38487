package chat

import (
	"bytes"
	"encoding/json"
)

// openAIToolChoice decodes an OpenAI tool_choice: a mode ("none", "auto",
// "required"), returned, or an object, decoded into named; absent or null
// it is neither.
func openAIToolChoice(raw json.RawMessage, named any) (mode string, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if json.Unmarshal(raw, &mode) == nil {
		if mode == "none" || mode == "auto" || mode == "required" {
			return mode, nil
		}
		return "", badRequest("tool_choice", `tool_choice %q is not one of "none", "auto", "required"`, mode)
	}
	if err := json.Unmarshal(raw, named); err != nil {
		return "", badRequest("tool_choice", "tool_choice must be a string or an object")
	}
	return "", nil
}

// unpairedTool finds the first break, in a conversation's messages, of the
// rule all three APIs state in their own words: a tool result answers a
// call made before it, and a call is answered before the conversation goes
// on. Upstream wants the results right after the calls; any later result
// is accepted here. at is the first result (a RoleTool message) whose call
// id no earlier call has, named orphan (with needID, an empty id is always
// one: Chat Completions requires the id); else at is the first message
// with a call, unanswered, that no later result answers although messages
// follow its own (the last message's calls may still wait for their
// results); at is -1 when the rule holds.
func unpairedTool(msgs []Message, needID bool) (at int, orphan, unanswered string) {
	answered := map[string]bool{} // by call id, for the calls made so far
	for i, m := range msgs {
		for _, tc := range m.ToolCalls {
			answered[tc.ID] = false
		}
		if m.Role == RoleTool {
			if _, called := answered[m.ToolCallID]; !called || needID && m.ToolCallID == "" {
				return i, m.ToolCallID, ""
			}
			answered[m.ToolCallID] = true
		}
	}
	for i, m := range msgs {
		for _, tc := range m.ToolCalls {
			if !answered[tc.ID] && i < len(msgs)-1 {
				return i, "", tc.ID
			}
		}
	}
	return -1, "", ""
}
