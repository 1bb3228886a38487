package chat

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The conversation list an Anthropic body's decoding makes and shares with
// the session's other turns (MessagesRequest.normaliseAll, shares).

// messagesOf decodes a Messages body of elems with system (a JSON value, ""
// for none) after prev.
func messagesOf(t *testing.T, elems []string, system string, prev *PrevBody) (*MessagesRequest, *PrevBody) {
	t.Helper()
	tail := ""
	if system != "" {
		tail = `,"system":` + system
	}
	r, next, err := DecodeMessages(turnsBody("messages", `"model":"m","max_tokens":9,`, elems, tail), true, prev)
	if err != nil {
		t.Fatal(err)
	}
	return r, next
}

// coldMessages is the conversation of the same body decoded alone.
func coldMessages(t *testing.T, elems []string, system string, strip bool) []Message {
	t.Helper()
	r, _ := messagesOf(t, elems, system, nil)
	c, err := r.Conversation(strip)
	if err != nil {
		t.Fatal(err)
	}
	return c.Messages
}

// checkMessages fails the test unless r's conversation is the cold one.
func checkMessages(t *testing.T, name string, r *MessagesRequest, elems []string, system string, strip bool) *Conversation {
	t.Helper()
	c, err := r.Conversation(strip)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(coldMessages(t, elems, system, strip), c.Messages); diff != "" {
		t.Errorf("%s (-cold +warm):\n%s", name, diff)
	}
	return c
}

// TestAnthropicSystemChanges: a session's next body with another system
// prompt keeps its messages but gets a list of its own, whose first message
// is the new system, and hands it out as its conversation; what the earlier
// bodies' conversations hold does not change, whichever way the system goes.
func TestAnthropicSystemChanges(t *testing.T) {
	elems := []string{`{"role":"user","content":"hi"}`}
	var prev *PrevBody
	var got []*Conversation
	var bodies [][]byte
	for n, system := range []string{`"A"`, `"A"`, `"B"`, `"B"`, ``, `"A"`} {
		elems = append(elems, fmt.Sprintf(`{"role":"assistant","content":"a%d"}`, n), fmt.Sprintf(`{"role":"user","content":"u%d"}`, n))
		tail := ""
		if system != "" {
			tail = `,"system":` + system
		}
		body := turnsBody("messages", `"model":"m","max_tokens":9,`, elems, tail)
		r, next, err := DecodeMessages(body, true, prev)
		if err != nil {
			t.Fatal(err)
		}
		c, err := r.Conversation(true)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.norms) == 0 || &c.Messages[0] != &r.norms[0] {
			t.Errorf("turn %d: the conversation was built again, not the list made at decoding", n)
		}
		got, bodies, prev = append(got, c), append(bodies, body), next
	}
	for n, body := range bodies {
		r, _, err := DecodeMessages(body, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := r.Conversation(true)
		if diff := cmp.Diff(want.Messages, got[n].Messages); diff != "" {
			t.Errorf("turn %d (-cold +warm):\n%s", n, diff)
		}
	}
}

// TestAnthropicMovedMarkerKeepsList: Claude Code moves cache_control to the
// newest message every turn, so the previous newest one is decoded again;
// its forms are the same, and the list is still appended to in place.
func TestAnthropicMovedMarkerKeepsList(t *testing.T) {
	msg := claudeMessage
	var prev *PrevBody
	for n := 1; n <= 40; n += 2 {
		var elems []string
		for i := range n {
			elems = append(elems, msg(i, i == n-1))
		}
		r, next := messagesOf(t, elems, `"S"`, prev)
		checkMessages(t, fmt.Sprintf("turn %d", n), r, elems, `"S"`, true)
		if n > 3 && reflect.ValueOf(prev.norms).Pointer() != reflect.ValueOf(next.norms).Pointer() && len(next.norms) <= cap(prev.norms) {
			t.Errorf("turn %d: the list was copied, not appended to", n)
		}
		prev = next
	}
}

// TestAnthropicListEdges: bodies the shared list must not misread.
func TestAnthropicListEdges(t *testing.T) {
	u0 := `{"role":"user","content":"u0"}`

	// Two branches from one body, then a turn after the first: the
	// second branch's messages (a tool result and a text: two forms for
	// one message) must not show in the first's.
	_, p := messagesOf(t, []string{u0}, `"A"`, nil)
	b1 := []string{u0, `{"role":"assistant","content":"a1"}`, `{"role":"user","content":"u1"}`}
	_, n1 := messagesOf(t, b1, `"A"`, p)
	b2 := []string{u0, `{"role":"assistant","content":"a2"}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r"},{"type":"text","text":"u2"}]}`}
	messagesOf(t, b2, `"A"`, p)
	after := append(b1[:3:3], `{"role":"assistant","content":"a3"}`)
	r, _ := messagesOf(t, after, `"A"`, n1)
	checkMessages(t, "a turn after the first of two branches", r, after, `"A"`, true)

	// A previous body with a message that does not normalise (no list),
	// then the retry that fixes it.
	_, p = messagesOf(t, []string{u0, `{"role":"bogus","content":"x"}`}, "", nil)
	fixed := []string{u0, `{"role":"user","content":"u1"}`}
	r, _ = messagesOf(t, fixed, "", p)
	checkMessages(t, "a retry after a message that did not normalise", r, fixed, "", true)

	// A system of the billing header alone, read with the header kept: the
	// list made at decoding has no system message, the conversation does.
	for _, elems := range [][]string{{u0}, {`{"role":"user","content":[{"type":"image","source":{}}]}`}} {
		r, _ := messagesOf(t, elems, `"x-anthropic-billing-header: cc=1"`, nil)
		checkMessages(t, "a billing-header system kept: "+elems[0], r, elems, `"x-anthropic-billing-header: cc=1"`, false)
	}

	// Messages replaced or dropped by the caller after decoding.
	r, _ = messagesOf(t, []string{`{"role":"user","content":"old"}`, `{"role":"assistant","content":"b"}`}, `"S"`, nil)
	r.Messages[0] = AnthropicMessage{Role: "user", Content: json.RawMessage(`"new"`)}
	if c, err := r.Conversation(true); err != nil || c.Messages[1].Content != "new" {
		t.Errorf("a replaced message: %+v, %v", c, err)
	}
	r, _ = messagesOf(t, []string{`{"role":"user","content":"a"}`, `{"role":"assistant","content":"b"}`}, `"S"`, nil)
	r.Messages = r.Messages[:1]
	if c, err := r.Conversation(true); err != nil || len(c.Messages) != 2 {
		t.Errorf("a dropped message: %+v, %v", c, err)
	}

	// A caller's append to one turn's conversation does not reach the
	// next turn's, which lies after it in the same array.
	r1, p1 := messagesOf(t, []string{u0}, `"A"`, nil)
	c1, _ := r1.Conversation(true)
	r2, _ := messagesOf(t, []string{u0, `{"role":"assistant","content":"a1"}`}, `"A"`, p1)
	c2, _ := r2.Conversation(true)
	_ = append(c1.Messages, Message{Role: RoleUser, Content: "clobber"})
	if got := c2.Messages[len(c2.Messages)-1].Content; got != "a1" {
		t.Errorf("the next turn's newest message is now %q", got)
	}
}
