package agentctx

// The input trigger is classified on the request as the client sent it, before
// any normalisation, with one rule per API (Dynamo's input_trigger.rs).

// TriggerForChat classifies an OpenAI Chat Completions request by the role of
// its last message.
func TriggerForChat(lastRole string) InputTrigger {
	switch lastRole {
	case "user":
		return TriggerUserMessage
	case "tool", "function":
		return TriggerToolResult
	}
	return TriggerOther
}

// ResponsesItem is the shape of one Responses API input item that matters for
// classification: its type ("message", "function_call_output", …) and, for
// messages, its role.
type ResponsesItem struct {
	Type string
	Role string
}

// TriggerForResponses classifies an OpenAI Responses request. A plain string
// input is a user message; otherwise the last item decides.
func TriggerForResponses(textInput bool, items []ResponsesItem) InputTrigger {
	if textInput {
		return TriggerUserMessage
	}
	if len(items) == 0 {
		return TriggerOther
	}
	last := items[len(items)-1]
	switch last.Type {
	case "function_call_output", "custom_tool_call_output", "local_shell_call_output", "mcp_call_output":
		return TriggerToolResult
	case "message", "":
		if last.Role == "user" {
			return TriggerUserMessage
		}
	}
	return TriggerOther
}

// AnthropicMessage is the shape of one Anthropic Messages message that matters
// for classification.
type AnthropicMessage struct {
	Role          string
	HasToolResult bool // any content block of type tool_result
}

// TriggerForAnthropic classifies an Anthropic Messages request: the last user
// message carrying a tool_result block makes it a tool result, anything else a
// user message.
func TriggerForAnthropic(msgs []AnthropicMessage) InputTrigger {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			if msgs[i].HasToolResult {
				return TriggerToolResult
			}
			return TriggerUserMessage
		}
	}
	return TriggerUserMessage
}

// TriggerForCompletions classifies a legacy Completions request: always other.
func TriggerForCompletions() InputTrigger { return TriggerOther }
