package frontend

import "switchyard.dev/pkg/chat"

// unpairedTool finds the first break, in a normalised conversation, of the
// rule all three APIs state in their own words: a tool result answers a call
// made before it, and a call is answered before the conversation goes on.
// orphan is a result whose call id no earlier call has; else unanswered is a
// call that no later result answers although messages follow its own (the
// last message's calls may still wait for their results). Upstream wants the
// results right after the calls; any later result is accepted here.
//
// It serves the APIs whose blocks and items only the normalised conversation
// exposes (Anthropic Messages, OpenAI Responses); Chat Completions pairs its
// wire messages (checkChatToolMessages), which name the offending index.
func unpairedTool(c *chat.Conversation) (orphan, unanswered string, found bool) {
	answered := map[string]bool{} // by call id, for the calls made so far
	for _, m := range c.Messages {
		for _, tc := range m.ToolCalls {
			answered[tc.ID] = false
		}
		if m.Role == chat.RoleTool {
			if _, called := answered[m.ToolCallID]; !called {
				return m.ToolCallID, "", true
			}
			answered[m.ToolCallID] = true
		}
	}
	for i, m := range c.Messages {
		for _, tc := range m.ToolCalls {
			if !answered[tc.ID] && i < len(c.Messages)-1 {
				return "", tc.ID, true
			}
		}
	}
	return "", "", false
}
