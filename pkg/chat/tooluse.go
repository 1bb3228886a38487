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

// toolFault is what is wrong, by the rule all three APIs share, with a
// tool the prompt would render, named name with schema as its arguments'
// JSON schema: "name" when it has no name (the prompt could not list it),
// "schema" when the schema is there but not an object, "" when nothing is.
// A null schema is none, as vLLM's optional parameters read it.
func toolFault(name string, schema json.RawMessage) string {
	if name == "" {
		return "name"
	}
	s := bytes.TrimSpace(schema)
	if len(s) > 0 && s[0] != '{' && string(s) != "null" {
		return "schema"
	}
	return ""
}

// openAIToolError reports a toolFault in OpenAI's words for the tool at
// param at, whose fields are name and parameters (Chat Completions nests
// them in function, Responses does not).
func openAIToolError(at, fault string) error {
	if fault == "name" {
		return badRequest(at+".name", "tool name is required")
	}
	return badRequest(at+".parameters", "parameters must be a JSON object")
}

// toolTurn is what unpairedTool reads of a message: whether it is a tool
// result, the call id it answers, and the ids of the calls it makes. Both
// the normalised Message and Chat Completions' wire ChatMessage have it, so
// a request is checked without a copy of its history.
type toolTurn[M any] interface {
	*M
	answers() (id string, ok bool)
	calls() int
	callID(j int) string
}

func (m *Message) answers() (string, bool) { return m.ToolCallID, m.Role == RoleTool }
func (m *Message) calls() int              { return len(m.ToolCalls) }
func (m *Message) callID(j int) string     { return m.ToolCalls[j].ID }

// A legacy role "function" message is a tool result without a call id: it
// is not paired; only an assistant message's calls count.
func (m *ChatMessage) answers() (string, bool) { return m.ToolCallID, m.Role == "tool" }
func (m *ChatMessage) callID(j int) string     { return m.ToolCalls[j].ID }
func (m *ChatMessage) calls() int {
	if m.Role != "assistant" {
		return 0
	}
	return len(m.ToolCalls)
}

// unpairedTool finds the first break, in a conversation's messages, of the
// rule all three APIs state in their own words: a tool result answers a
// call made before it, and a call is answered before the conversation goes
// on. Upstream wants the results right after the calls; any later result
// is accepted here. at is the first result (a tool result message) whose call
// id no earlier call has, named orphan (with needID, an empty id is always
// one: Chat Completions requires the id); else at is the first message
// with a call, unanswered, that no later result answers although messages
// follow its own (the last message's calls may still wait for their
// results); at is -1 when the rule holds.
func unpairedTool[M any, P toolTurn[M]](msgs []M, needID bool) (at int, orphan, unanswered string) {
	if answeredInPlace[M, P](msgs) {
		return -1, "", ""
	}
	return unpairedToolAnywhere[M, P](msgs, needID)
}

// answeredInPlace reports the shape agents send, for which unpairedTool's
// rule holds: every call is answered by the results right after its
// message, before any other message, each result answering one call of
// that message. It checks this in one pass without a map (a long session's
// history has hundreds of calls, checked again at every turn); any other
// shape, valid or not, is left to unpairedToolAnywhere.
func answeredInPlace[M any, P toolTurn[M]](msgs []M) bool {
	const most = 64 // calls in one message; more are left to the map
	var done [most]bool
	var group P // the message whose calls the results after it answer
	open := 0   // its calls not answered yet
	for i := range msgs {
		m := P(&msgs[i])
		id, result := m.answers()
		if !result {
			if open > 0 || m.calls() > most {
				return false
			}
			group, open = m, m.calls()
			clear(done[:open])
			continue
		}
		if group == nil || id == "" {
			return false
		}
		j := 0
		for j < group.calls() && (done[j] || group.callID(j) != id) {
			j++
		}
		if j == group.calls() || m.calls() > 0 {
			return false
		}
		done[j] = true
		open--
	}
	return open == 0
}

// unpairedToolAnywhere is unpairedTool for any shape: results may come
// anywhere after their calls.
func unpairedToolAnywhere[M any, P toolTurn[M]](msgs []M, needID bool) (at int, orphan, unanswered string) {
	answered := map[string]bool{} // by call id, for the calls made so far
	for i := range msgs {
		m := P(&msgs[i])
		for j := range m.calls() {
			answered[m.callID(j)] = false
		}
		if id, result := m.answers(); result {
			if _, called := answered[id]; !called || needID && id == "" {
				return i, id, ""
			}
			answered[id] = true
		}
	}
	for i := range msgs {
		m := P(&msgs[i])
		for j := range m.calls() {
			if !answered[m.callID(j)] && i < len(msgs)-1 {
				return i, "", m.callID(j)
			}
		}
	}
	return -1, "", ""
}
