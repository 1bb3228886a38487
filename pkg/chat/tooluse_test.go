package chat

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestUnpairedToolInPlaceAgreesWithTheMap holds unpairedTool (its one-pass
// check of the usual shape first) to the map-based rule on random
// conversations: calls answered in place, late, twice, never; results
// without ids, for calls of earlier messages, for no call; ids used again.
func TestUnpairedToolInPlaceAgreesWithTheMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inPlace := 0
	for n := range 20_000 {
		msgs := randomToolConversation(rng)
		wire := make([]ChatMessage, len(msgs))
		for i, m := range msgs {
			wire[i] = ChatMessage{Role: m.Role, ToolCallID: m.ToolCallID}
			for _, tc := range m.ToolCalls {
				wire[i].ToolCalls = append(wire[i].ToolCalls, ChatToolCall{ID: tc.ID})
			}
		}
		for _, needID := range []bool{false, true} {
			at, orphan, unanswered := unpairedTool(msgs, needID)
			wat, worphan, wunanswered := unpairedToolAnywhere(msgs, needID)
			if at != wat || orphan != worphan || unanswered != wunanswered {
				t.Fatalf("#%d %s needID=%v: unpairedTool %d %q %q, the map %d %q %q",
					n, describeToolConversation(msgs), needID, at, orphan, unanswered, wat, worphan, wunanswered)
			}
			at, orphan, unanswered = unpairedTool(wire, needID)
			wat, worphan, wunanswered = unpairedToolAnywhere(wire, needID)
			if at != wat || orphan != worphan || unanswered != wunanswered {
				t.Fatalf("#%d %s (wire) needID=%v: unpairedTool %d %q %q, the map %d %q %q",
					n, describeToolConversation(msgs), needID, at, orphan, unanswered, wat, worphan, wunanswered)
			}
		}
		if answeredInPlace(msgs) {
			inPlace++
		}
	}
	// The generator must exercise both paths.
	if inPlace < 1_000 || inPlace > 19_000 {
		t.Fatalf("%d of 20,000 conversations in place: the generator no longer covers both paths", inPlace)
	}
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
	} {
		if got := answeredInPlace(c.msgs); got != c.want {
			t.Errorf("%s: answeredInPlace %v, want %v", c.name, got, c.want)
		}
	}
}

// randomToolConversation is a conversation of users, assistants with up to
// three calls and tool results, mostly in the shape agents send (each
// call's result right after its message) with faults mixed in: results
// late, missing, doubled, without an id, for an unknown call or making a
// call, and ids
// from a small pool, so that they repeat.
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
