package chat

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// referenceUnpairedTool is the rule as it was written before the one-pass
// check and the wire accessors, kept here to hold both to it: the map over
// every call, on Messages (the wire's converted as referenceWire does).
func referenceUnpairedTool(msgs []Message, needID bool) (at int, orphan, unanswered string) {
	answered := map[string]bool{}
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

// referenceWire is what Chat Completions' check used to pair: an
// assistant's calls and a tool message's id, nothing of any other role.
func referenceWire(wire []ChatMessage) []Message {
	msgs := make([]Message, len(wire))
	for i, m := range wire {
		switch m.Role {
		case "assistant":
			for _, tc := range m.ToolCalls {
				msgs[i].ToolCalls = append(msgs[i].ToolCalls, ToolCall{ID: tc.ID})
			}
		case "tool":
			msgs[i] = Message{Role: RoleTool, ToolCallID: m.ToolCallID}
		}
	}
	return msgs
}

// checkAgainstReference fails t where unpairedTool, on msgs or on wire,
// answers otherwise than the reference.
func checkAgainstReference(t *testing.T, what string, msgs []Message, wire []ChatMessage) {
	t.Helper()
	for _, needID := range []bool{false, true} {
		if msgs != nil {
			at, orphan, unanswered := unpairedTool(msgs, needID)
			rat, rorphan, runanswered := referenceUnpairedTool(msgs, needID)
			if at != rat || orphan != rorphan || unanswered != runanswered {
				t.Fatalf("%s needID=%v: unpairedTool %d %q %q, the reference %d %q %q", what, needID, at, orphan, unanswered, rat, rorphan, runanswered)
			}
		}
		if wire != nil {
			at, orphan, unanswered := unpairedTool(wire, needID)
			rat, rorphan, runanswered := referenceUnpairedTool(referenceWire(wire), needID)
			if at != rat || orphan != rorphan || unanswered != runanswered {
				t.Fatalf("%s (wire) needID=%v: unpairedTool %d %q %q, the reference %d %q %q", what, needID, at, orphan, unanswered, rat, rorphan, runanswered)
			}
		}
	}
}

// TestUnpairedToolAgreesWithTheReference holds unpairedTool (its one-pass
// check of the usual shape first, then the map) to the reference on random
// conversations, Messages and wire messages of every role: calls answered
// in place, late, twice, never; results without ids, for calls of earlier
// messages, for no call, making calls themselves; ids used again; roles
// that carry calls or ids the rule does not pair.
func TestUnpairedToolAgreesWithTheReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inPlace := 0
	for n := range 20_000 {
		msgs := randomToolConversation(rng)
		checkAgainstReference(t, fmt.Sprintf("#%d %s", n, describeToolConversation(msgs)), msgs, nil)
		if answeredInPlace(msgs) {
			inPlace++
		}
		wire := make([]ChatMessage, len(msgs))
		roles := []string{"user", "system", "developer", "assistant", "tool", "function"}
		for i, m := range msgs {
			wire[i] = ChatMessage{Role: m.Role, ToolCallID: m.ToolCallID}
			if rng.IntN(20) == 0 { // a role the rule does not pair, carrying what it pairs
				wire[i].Role = roles[rng.IntN(len(roles))]
			}
			for _, tc := range m.ToolCalls {
				wire[i].ToolCalls = append(wire[i].ToolCalls, ChatToolCall{ID: tc.ID})
			}
		}
		checkAgainstReference(t, fmt.Sprintf("#%d %s (roles changed)", n, describeToolConversation(msgs)), nil, wire)
	}
	// The generator must exercise both paths.
	if inPlace < 1_000 || inPlace > 19_000 {
		t.Fatalf("%d of 20,000 conversations in place: the generator no longer covers both paths", inPlace)
	}
}

// TestUnpairedToolAgreesWithTheReferenceExhaustively: every wire
// conversation of up to four messages over kinds that cover each role with
// and without calls and ids, and two ids that may repeat.
func TestUnpairedToolAgreesWithTheReferenceExhaustively(t *testing.T) {
	calls := func(ids ...string) []ChatToolCall {
		var tcs []ChatToolCall
		for _, id := range ids {
			tcs = append(tcs, ChatToolCall{ID: id})
		}
		return tcs
	}
	kinds := []ChatMessage{
		{Role: "user"},
		{Role: "user", ToolCalls: calls("a")},
		{Role: "assistant"},
		{Role: "assistant", ToolCalls: calls("a")},
		{Role: "assistant", ToolCalls: calls("b")},
		{Role: "assistant", ToolCalls: calls("a", "b")},
		{Role: "assistant", ToolCalls: calls("a", "a")},
		{Role: "assistant", ToolCalls: calls("")},
		{Role: "tool", ToolCallID: "a"},
		{Role: "tool", ToolCallID: "b"},
		{Role: "tool", ToolCallID: ""},
		{Role: "tool", ToolCallID: "a", ToolCalls: calls("b")},
		{Role: "function"},
		{Role: "function", ToolCallID: "a", ToolCalls: calls("b")},
		{Role: "system", ToolCallID: "a"},
	}
	var walk func(wire []ChatMessage)
	walk = func(wire []ChatMessage) {
		msgs := make([]Message, len(wire)) // the same kinds as Messages: every role's calls and ids count
		for i, m := range wire {
			msgs[i] = Message{Role: m.Role, ToolCallID: m.ToolCallID}
			for _, tc := range m.ToolCalls {
				msgs[i].ToolCalls = append(msgs[i].ToolCalls, ToolCall{ID: tc.ID})
			}
		}
		checkAgainstReference(t, fmt.Sprint(wire), msgs, wire)
		if len(wire) == 4 {
			return
		}
		for _, k := range kinds {
			walk(append(wire[:len(wire):len(wire)], k))
		}
	}
	walk(nil)
}

// TestUnpairedToolInPlace: the shapes the one pass decides alone, and the
// ones it must leave to the map although they look close.
func TestUnpairedToolInPlace(t *testing.T) {
	call := func(ids ...string) Message {
		m := Message{Role: RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id})
		}
		return m
	}
	result := func(id string) Message { return Message{Role: RoleTool, ToolCallID: id} }
	user := Message{Role: RoleUser}
	for _, c := range []struct {
		name string
		msgs []Message
		want bool
	}{
		{"no calls", []Message{user, call(), user}, true},
		{"answered in order", []Message{user, call("a", "b"), result("a"), result("b"), user}, true},
		{"answered out of order", []Message{user, call("a", "b"), result("b"), result("a")}, true},
		{"pending at the end", []Message{user, call("a")}, false},
		{"answered late", []Message{user, call("a"), user, result("a")}, false},
		{"an earlier message's call", []Message{call("a"), result("a"), call("b"), result("a"), result("b")}, false},
		{"answered twice", []Message{call("a"), result("a"), result("a")}, false},
		{"an id used twice in one message", []Message{call("a", "a"), result("a")}, false},
		{"a result without an id", []Message{call(""), result("")}, false},
		{"a result first", []Message{result("a")}, false},
		{"more calls in one message than the pass keeps", append([]Message{call(manyIDs(65)...)}, results(manyIDs(65))...), false},
		{"as many as it keeps", append([]Message{call(manyIDs(64)...)}, results(manyIDs(64))...), true},
	} {
		if got := answeredInPlace(c.msgs); got != c.want {
			t.Errorf("%s: answeredInPlace %v, want %v", c.name, got, c.want)
		}
		checkAgainstReference(t, c.name, c.msgs, nil)
	}
}

func manyIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("call_", i)
	}
	return ids
}

func results(ids []string) []Message {
	msgs := make([]Message, len(ids))
	for i, id := range ids {
		msgs[i] = Message{Role: RoleTool, ToolCallID: id}
	}
	return msgs
}

// randomToolConversation is a conversation of users, assistants with up to
// three calls and tool results, mostly in the shape agents send (each
// call's result right after its message) with faults mixed in: results
// late, missing, doubled, without an id, for an unknown call or making a
// call, and ids from a small pool, so that they repeat.
func randomToolConversation(rng *rand.Rand) []Message {
	var msgs []Message
	id := func() string {
		if rng.IntN(50) == 0 {
			return ""
		}
		return fmt.Sprint("c", rng.IntN(12))
	}
	var late []string
	for range rng.IntN(12) {
		switch rng.IntN(6) {
		case 0:
			msgs = append(msgs, Message{Role: RoleUser})
		default:
			m := Message{Role: RoleAssistant}
			for range rng.IntN(4) {
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id()})
			}
			msgs = append(msgs, m)
			answers := make([]string, 0, len(m.ToolCalls))
			for _, tc := range m.ToolCalls {
				answers = append(answers, tc.ID)
			}
			rng.Shuffle(len(answers), func(i, j int) { answers[i], answers[j] = answers[j], answers[i] })
			for _, a := range answers {
				switch rng.IntN(30) {
				case 0: // never answered
				case 1: // answered later
					late = append(late, a)
				case 2: // answered twice
					msgs = append(msgs, Message{Role: RoleTool, ToolCallID: a}, Message{Role: RoleTool, ToolCallID: a})
				case 3: // for another call
					msgs = append(msgs, Message{Role: RoleTool, ToolCallID: id()})
				case 4: // a result that also calls (no API sends one; the rule still counts it)
					msgs = append(msgs, Message{Role: RoleTool, ToolCallID: a, ToolCalls: []ToolCall{{ID: id()}}})
				default:
					msgs = append(msgs, Message{Role: RoleTool, ToolCallID: a})
				}
			}
			if len(late) > 0 && rng.IntN(3) == 0 {
				msgs = append(msgs, Message{Role: RoleTool, ToolCallID: late[0]})
				late = late[1:]
			}
		}
	}
	return msgs
}

func describeToolConversation(msgs []Message) string {
	s := ""
	for _, m := range msgs {
		switch {
		case m.Role == RoleTool:
			s += fmt.Sprintf(" result(%q)", m.ToolCallID)
		case len(m.ToolCalls) > 0:
			s += " call("
			for j, tc := range m.ToolCalls {
				if j > 0 {
					s += ","
				}
				s += fmt.Sprintf("%q", tc.ID)
			}
			s += ")"
		default:
			s += " " + m.Role
		}
	}
	return s
}

// TestToolDefinitionsChecked: every API rejects, naming the field in its
// own style, a tool the prompt would render that has no name or a schema
// that is not an object, and keeps taking the tools it does not render
// (server and built-in tools), which may lack both.
func TestToolDefinitionsChecked(t *testing.T) {
	bodies := map[string]string{
		"chat":      `{"messages":[{"role":"user","content":"hi"}],"tools":%s}`,
		"messages":  `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":%s}`,
		"responses": `{"input":"hi","tools":%s}`,
	}
	for _, tt := range []struct {
		api, tools     string
		param, message string   // the error; "" when the tools are accepted
		names          []string // the tools rendered, when accepted
	}{
		{api: "chat", tools: `[{"type":"function"}]`, param: "tools[0].function.name", message: "tool name is required"},
		{api: "chat", tools: `[{"type":"function","function":{"name":"f","parameters":"notobj"}}]`,
			param: "tools[0].function.parameters", message: "parameters must be a JSON object"},
		{api: "chat", tools: `[{"function":{"name":"f","parameters":{}}},{"type":"function","function":{"name":"g","parameters":[]}}]`,
			param: "tools[1].function.parameters", message: "parameters must be a JSON object"},
		{api: "chat", tools: `[{"type":"function","function":{"name":"f","parameters":null}},{"type":"web_search"},{"type":"custom","custom":{"name":"c"}}]`,
			names: []string{"f"}},

		{api: "messages", tools: `[{}]`, param: "tools.0.name", message: "Field required"},
		{api: "messages", tools: `[{"name":"a","input_schema":{}},{"type":"custom","input_schema":{}}]`, param: "tools.1.name", message: "Field required"},
		{api: "messages", tools: `[{"type":"custom","name":""}]`, param: "tools.0.name", message: "Field required"},
		{api: "messages", tools: `[{"name":"a","input_schema":"x"}]`, param: "tools.0.input_schema", message: "Input should be a valid dictionary"},
		{api: "messages", tools: `[{"type":"web_search_20250305","name":"web_search","max_uses":5},{"type":"text_editor_20250124"},` +
			`{"name":"Read","input_schema":{"type":"object"}},{"name":"Null","input_schema":null},{"type":"custom","name":"Bare"}]`,
			names: []string{"Read", "Null", "Bare"}},

		{api: "responses", tools: `[{"type":"function"}]`, param: "tools[0].name", message: "tool name is required"},
		{api: "responses", tools: `[{"type":"custom","format":{"type":"text"}}]`, param: "tools[0].name", message: "tool name is required"},
		{api: "responses", tools: `[{"type":"function","name":"f","parameters":"x"}]`, param: "tools[0].parameters", message: "parameters must be a JSON object"},
		{api: "responses", tools: `[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"a"},{"type":"function"}]}]`,
			param: "tools[0].tools[1].name", message: "tool name is required"},
		{api: "responses", tools: `[{"type":"web_search"},{"type":"tool_search","parameters":{"type":"object"}},{"type":"file_search","vector_store_ids":[]},` +
			`{"type":"function","name":"f","parameters":{}},{"type":"custom","name":"apply_patch"},{"type":"namespace","tools":[{"type":"function","name":"g"}]}]`,
			names: []string{"f", "apply_patch", "g"}},
	} {
		d, _ := apiDecoders[tt.api]([]byte(fmt.Sprintf(bodies[tt.api], tt.tools)), nil)
		if tt.param != "" {
			re, ok := d.Err.(*RequestError)
			if !ok || re.Param != tt.param || re.Message != tt.message {
				t.Errorf("%s %s: got %v, want param %q message %q", tt.api, tt.tools, d.Err, tt.param, tt.message)
			}
			continue
		}
		if d.Err != nil {
			t.Errorf("%s %s: %v", tt.api, tt.tools, d.Err)
			continue
		}
		var names []string
		for _, tool := range d.Conv.Tools {
			names = append(names, tool.Name)
		}
		if fmt.Sprint(names) != fmt.Sprint(tt.names) {
			t.Errorf("%s %s: rendered tools %v, want %v", tt.api, tt.tools, names, tt.names)
		}
	}
}

// TestResponsesAdditionalToolsChecked: tools an input item adds are held
// to the same rule, named from the item.
func TestResponsesAdditionalToolsChecked(t *testing.T) {
	body := `{"input":[{"role":"user","content":"hi"},{"type":"additional_tools","tools":[{"type":"function","parameters":{}}]}]}`
	d, _ := apiDecoders["responses"]([]byte(body), nil)
	if re, ok := d.Err.(*RequestError); !ok || re.Param != "input[1].tools[0].name" {
		t.Fatalf("got %v, want an error naming input[1].tools[0].name", d.Err)
	}
}
