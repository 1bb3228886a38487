package chat

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/trace"
)

// decoded is everything the frontend takes from one request body.
type decoded struct {
	Req     any
	Conv    *Conversation
	Kinds   ToolKinds
	Trigger agentctx.InputTrigger
	UserID  string
	Err     error
}

// apiDecoders decode a body of each API with everything derived from it,
// given what the session's previous body left.
var apiDecoders = map[string]func(body []byte, prev *PrevBody) (decoded, *PrevBody){
	"chat": func(body []byte, prev *PrevBody) (decoded, *PrevBody) {
		r, next, err := DecodeChatCompletion(body, prev)
		if err != nil {
			return decoded{Err: err}, nil
		}
		d := decoded{Req: r, Trigger: agentctx.TriggerForChat(r.LastRole())}
		d.Conv, d.Err = r.Conversation()
		return d, next
	},
	"messages": func(body []byte, prev *PrevBody) (decoded, *PrevBody) {
		r, next, err := DecodeMessages(body, true, prev)
		if err != nil {
			return decoded{Err: err}, nil
		}
		d := decoded{Req: r, Trigger: r.Trigger(), UserID: r.UserID()}
		d.Conv, d.Err = r.Conversation(true)
		return d, next
	},
	"responses": func(body []byte, prev *PrevBody) (decoded, *PrevBody) {
		r, next, err := DecodeResponses(body, prev)
		if err != nil {
			return decoded{Err: err}, nil
		}
		d := decoded{Req: r, Trigger: r.Trigger()}
		d.Conv, d.Kinds, d.Err = r.Conversation()
		return d, next
	},
}

var allowUnexported = cmp.AllowUnexported(AnthropicMessage{}, ResponsesRequest{}, ChatMessage{}, ChatCompletionRequest{}, MessagesRequest{}, Conversation{})

// checkIncremental decodes body with prev and without, fails the test if the
// results differ, and returns what the body leaves for the next one.
func checkIncremental(t testing.TB, api string, body []byte, prev *PrevBody) *PrevBody {
	t.Helper()
	dec := apiDecoders[api]
	full, _ := dec(body, nil)
	inc, next := dec(body, prev)
	if diff := cmp.Diff(full, inc, allowUnexported); diff != "" {
		t.Fatalf("%s: incremental decode differs from the full one (-full +incremental):\n%s\nbody: %.300q", api, diff, body)
	}
	// What the bodies share is the previous body's, up to one of its
	// character boundaries: a UTF-8 check of the rest then answers for the
	// whole body whenever the previous one was valid.
	if next != nil && prev == nil && next.shared != 0 {
		t.Fatalf("%s: shared %d without a previous body", api, next.shared)
	}
	if next != nil && prev != nil {
		n := next.shared
		if n > len(body) || n > len(prev.body) || !bytes.Equal(body[:n], prev.body[:n]) ||
			n < len(prev.body) && !utf8.RuneStart(prev.body[n]) {
			t.Fatalf("%s: shared %d of %.300q after %.300q", api, n, body, prev.body)
		}
		if utf8.Valid(prev.body) && utf8.Valid(body[n:]) != utf8.Valid(body) {
			t.Fatalf("%s: checking %.300q from %d is not checking it whole", api, body, n)
		}
	}
	return next
}

// reuses says whether decoding body with prev reuses any of prev's elements.
// It claims none of prev's room: the decode that follows may append in place.
func reuses(api string, body []byte, prev *PrevBody) bool {
	unclaimed := *prev
	unclaimed.elemsExt, unclaimed.endsExt, unclaimed.normsExt = nil, nil, nil
	prev = &unclaimed
	var ok bool
	switch api {
	case "chat":
		_, _, ok = decodeAfter(chatCompletionBody, body, prev)
	case "messages":
		_, _, ok = decodeAfter(messagesBody, body, prev)
	case "responses":
		_, _, ok = decodeAfter(responsesBody, body, prev)
	}
	return ok
}

// turnsBody renders a body of api: head members, the array of elements, tail
// members.
func turnsBody(api, head string, elems []string, tail string) []byte {
	field := "messages"
	if api == "responses" {
		field = "input"
	}
	return []byte(fmt.Sprintf(`{%s"%s":[%s]%s}`, head, field, strings.Join(elems, ","), tail))
}

// Elements of each API: a user message, an assistant tool call, its result.
var (
	chatElems = []string{`{"role":"system","content":"You are an agent."}`, `{"role":"user","content":"fix the \"bug\"\n"}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"}}]}`,
		`{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"package a"}]}`,
		`{"role":"assistant","content":"done \u00e9 \ud83d\ude00"}`, `{"role":"user","content":"thanks"}`}
	messagesElems = []string{`{"role":"user","content":[{"type":"text","text":"fix it"}]}`,
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"a.go"}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"package a"}]}`,
		`{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"go test"}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"ok"}]},{"type":"text","text":"and now?"}]}`,
		`{"role":"assistant","content":"all green"}`}
	responsesElems = []string{`{"type":"message","role":"developer","content":"be brief"}`, `{"role":"user","content":[{"type":"input_text","text":"fix it"}]}`,
		`{"type":"function_call","call_id":"c1","name":"read","arguments":"{}"}`, `{"type":"function_call_output","call_id":"c1","output":"package a"}`,
		`{"type":"reasoning","summary":[]}`, `{"type":"custom_tool_call","call_id":"c2","name":"apply_patch","input":"*** Begin Patch"}`,
		`{"type":"custom_tool_call_output","call_id":"c2","output":[{"type":"input_text","text":"done"}]}`}
	apiElems = map[string][]string{"chat": chatElems, "messages": messagesElems, "responses": responsesElems}
	apiHeads = map[string]string{"chat": `"model":"m","stream":true,`, "messages": `"model":"m","max_tokens":100,`, "responses": `"model":"m","stream":true,`}
	apiTails = map[string]string{
		"chat":      `,"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}],"max_tokens":50`,
		"messages":  `,"system":[{"type":"text","text":"x-anthropic-billing-header: cc=1;"},{"type":"text","text":"S"}],"tools":[{"name":"Read","input_schema":{"type":"object"}}],"metadata":{"user_id":"u"},"stream":true`,
		"responses": `,"tools":[{"type":"function","name":"read","parameters":{}},{"type":"custom","name":"apply_patch"}],"store":false`,
	}
)

// TestIncrementalDecodeEqualsFull replays sessions of each API whose bodies
// grow, change after the array, move markers, turn invalid, or repeat the
// array's name, and checks that decoding each body with what the previous
// one left equals decoding it alone, and that growing bodies reuse.
func TestIncrementalDecodeEqualsFull(t *testing.T) {
	for api, elems := range apiElems {
		head, tail := apiHeads[api], apiTails[api]
		// A session whose array grows by an element a turn.
		var prev *PrevBody
		for n := 1; n <= len(elems); n++ {
			body := turnsBody(api, head, elems[:n], tail)
			if prev != nil && !reuses(api, body, prev) {
				t.Errorf("%s turn %d: nothing reused", api, n)
			}
			if prev = checkIncremental(t, api, body, prev); prev == nil {
				t.Fatalf("%s turn %d: nothing to reuse next", api, n)
			}
		}
		grown := turnsBody(api, head, elems, tail)
		_, full, _ := strings.Cut(string(grown), "[")
		for _, tc := range []struct {
			name   string
			body   string
			reuses bool
		}{
			{"same body", string(grown), true},
			{"tail changed", string(turnsBody(api, head, elems, `,"stream":false`)), true},
			{"no tail", string(turnsBody(api, head, elems, "")), true},
			{"head changed", string(turnsBody(api, `"model":"other",`, elems, tail)), false},
			{"last element changed", string(turnsBody(api, head, append(elems[:len(elems)-1:len(elems)-1], `{"role":"user","content":"x"}`), tail)), true},
			{"elements dropped", string(turnsBody(api, head, elems[:2], tail)), true},
			{"pretty printed", strings.ReplaceAll(string(grown), "},{", "} ,\n\t{"), true},
			{"a null element", string(turnsBody(api, head, append(slicesClone(elems), `null`), tail)), true},
			{"new element of the wrong type", string(turnsBody(api, head, append(slicesClone(elems), `{"role":1}`), tail)), false},
			{"new element a number", string(turnsBody(api, head, append(slicesClone(elems), `7`), tail)), false},
			{"invalid after the kept elements", string(turnsBody(api, head, elems, tail))[:len(grown)-20] + `,,]}`, false},
			{"truncated", string(grown[:len(grown)-3]), false},
			{"trailing value", string(grown) + ` {}`, false},
			{"array repeated after", string(turnsBody(api, head, elems, tail+`,"messages":[{"role":"user","content":"x"}],"input":[{"role":"user","content":"x"}]`)), false},
			{"array repeated, case folded", string(turnsBody(api, head, elems, `,"MESSAGES":[],"Input":[]`)), false},
			{"array repeated, Unicode folded", string(turnsBody(api, head, elems, `,"meſſages":[],"ınput":[],"inpu\u0074":[]`)), false},
			{"array repeated, escaped key", string(turnsBody(api, head, elems, `,"me\u0073sages":[{"role":"user","content":"y"}],"\u0069nput":"s"`)), false},
			{"array then null", string(grown[:len(grown)-1]) + `,"messages":null,"input":null}`, false},
			{"prefix then an object", `{` + head + `"messages":{"role":"user"},"input":{}` + tail + `}`, false},
			{"deep nesting", string(turnsBody(api, head, append(slicesClone(elems), `{"role":"user","content":`+strings.Repeat("[", 10001)+`}`), tail)), false},
			{"unknown member with the array inside", `{` + head + `"x":[` + full + `}`, false},
		} {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				body := []byte(tc.body)
				if got := reuses(api, body, prev); got != tc.reuses {
					t.Errorf("reuses = %v, want %v", got, tc.reuses)
				}
				checkIncremental(t, api, body, prev)
			})
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// TestIncrementalDecodeBranches decodes several bodies that extend one
// previous body (retries, edits, sub-agents branching from one history), one
// after another and at once: the first appends its elements in place, the
// others copy, and no decode changes what another one returned or what a
// previous body holds.
func TestIncrementalDecodeBranches(t *testing.T) {
	for api, elems := range apiElems {
		head, tail := apiHeads[api], apiTails[api]
		body := func(es ...string) []byte { return turnsBody(api, head, es, tail) }
		// Two turns first, so that the previous body has room to append into.
		base := elems[:len(elems)-2]
		prev := checkIncremental(t, api, body(base[:len(base)-1]...), nil)
		prev = checkIncremental(t, api, body(base...), prev)
		x, y := elems[len(elems)-2], elems[len(elems)-1]
		steps := []struct {
			after int // the step whose body this one extends; -1 for prev
			body  []byte
		}{
			{-1, body(append(slicesClone(base), x)...)},   // appends in place
			{0, body(append(slicesClone(base), x, y)...)}, // after it, in place too
			{-1, body(append(slicesClone(base), y)...)},   // copies
			{-1, body(append(slicesClone(base), y, x)...)},
			{-1, body(base...)},
		}
		dec := apiDecoders[api]
		before, _ := dec(body(base...), nil)
		got := make([]decoded, len(steps))
		nexts := make([]*PrevBody, len(steps))
		for i, st := range steps {
			from := prev
			if st.after >= 0 {
				from = nexts[st.after]
			}
			got[i], nexts[i] = dec(st.body, from)
		}
		for i, st := range steps {
			full, _ := dec(st.body, nil)
			if diff := cmp.Diff(full, got[i], allowUnexported); diff != "" {
				t.Errorf("%s: step %d changed after the others were decoded (-full +kept):\n%s", api, i, diff)
			}
		}
		after, _ := dec(body(base...), prev)
		if diff := cmp.Diff(before, after, allowUnexported); diff != "" {
			t.Errorf("%s: the previous body changed (-before +after):\n%s", api, diff)
		}

		// At once: every branch from a fresh previous body, checked after all.
		prev = checkIncremental(t, api, body(base...), prev)
		results := make([]decoded, len(steps))
		done := make(chan int)
		for i, st := range steps {
			go func() {
				results[i], _ = dec(st.body, prev)
				done <- i
			}()
		}
		for range steps {
			<-done
		}
		for i, st := range steps {
			full, _ := dec(st.body, nil)
			if diff := cmp.Diff(full, results[i], allowUnexported); diff != "" {
				t.Errorf("%s: concurrent branch %d (-full +got):\n%s", api, i, diff)
			}
		}
	}
}

// claudeMessage is message i of a Claude Code session as its body holds it:
// a Read call, then its result, alternately; marked carries the
// cache_control marker Claude Code puts on the newest message.
func claudeMessage(i int, marked bool) string {
	cc := ""
	if marked {
		cc = `,"cache_control":{"type":"ephemeral"}`
	}
	if i%2 == 1 {
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"t%d","name":"Read","input":{"path":"f%d"}%s}]}`, i, i, cc)
	}
	return fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"line %d"%s}]}`, i-1, i, cc)
}

// TestIncrementalDecodeMovedCacheControl is Claude Code's pattern: each turn
// moves the cache_control marker from the previous last message to the new
// one, so the previous body's last message is decoded again.
func TestIncrementalDecodeMovedCacheControl(t *testing.T) {
	msg := claudeMessage
	var prev *PrevBody
	for n := 1; n <= 12; n++ {
		var elems []string
		for i := 0; i < n; i++ {
			elems = append(elems, msg(i, i == n-1))
		}
		body := turnsBody("messages", `"model":"claude",`, elems, `,"system":"s","max_tokens":64000,"stream":true`)
		if n > 2 && !reuses("messages", body, prev) {
			t.Fatalf("turn %d: nothing reused", n)
		}
		prev = checkIncremental(t, "messages", body, prev)
	}
	if got := len(prev.span.ends); got != 12 {
		t.Fatalf("%d element ends, want 12", got)
	}
}

// TestIncrementalDecodeAcrossAPIs: what one API's body left is ignored by
// another's decoder.
func TestIncrementalDecodeAcrossAPIs(t *testing.T) {
	chat := turnsBody("chat", apiHeads["chat"], chatElems, apiTails["chat"])
	_, prev, err := DecodeChatCompletion(chat, nil)
	if err != nil || prev == nil {
		t.Fatal(err)
	}
	body := []byte(string(chat[:len(chat)-1]) + `,"max_tokens":5}`)
	checkIncremental(t, "messages", body, prev)
	checkIncremental(t, "responses", body, prev)
}

// TestIncrementalDecodeWeka replays the sessions of a Weka (kv-cache-tester)
// workload as agent conversations of each API: a turn's prompt blocks become
// messages of a few blocks each, so consecutive turns share the messages of
// their common block prefix and differ where the trace's prompts do.
func TestIncrementalDecodeWeka(t *testing.T) {
	f, err := os.Open("../trace/testdata/weka_small.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := trace.ReadWeka(f, 0, "weka_small")
	if err != nil {
		t.Fatal(err)
	}
	reused, turns := 0, 0
	for api := range apiDecoders {
		for _, s := range w.Sessions {
			var prev *PrevBody
			for _, turn := range s.Turns {
				body := wekaBody(api, turn.Blocks)
				if prev != nil && reuses(api, body, prev) {
					reused++
				}
				turns++
				prev = checkIncremental(t, api, body, prev)
			}
		}
	}
	if turns == 0 || reused < turns/3 {
		t.Fatalf("%d of %d turns reused their previous body", reused, turns)
	}
}

// wekaBody is an agent conversation of api for a turn's prompt blocks: one
// message of text per 4 blocks, alternating between the roles of a tool loop.
func wekaBody(api string, blocks []uint64) []byte {
	var elems []string
	for i := 0; i < len(blocks); i += 4 {
		var text bytes.Buffer
		for _, id := range blocks[i:min(i+4, len(blocks))] {
			fmt.Fprintf(&text, "block %d\\n\\tline \\\"%x\\\"\\n", id, id*0x9e3779b97f4a7c15)
		}
		n := len(elems)
		var e string
		switch api {
		case "chat":
			e = []string{`{"role":"user","content":"%s"}`, `{"role":"assistant","content":"%s","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`, `{"role":"tool","tool_call_id":"c","content":"%s"}`}[n%3]
		case "messages":
			e = []string{`{"role":"user","content":[{"type":"text","text":"%s"}]}`, `{"role":"assistant","content":[{"type":"text","text":"%s"},{"type":"tool_use","id":"t","name":"f","input":{}}]}`}[n%2]
		case "responses":
			e = []string{`{"role":"user","content":"%s"}`, `{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}`, `{"type":"function_call_output","call_id":"c","output":"%s"}`}[n%3]
		}
		if strings.Contains(e, "%s") {
			e = fmt.Sprintf(e, text.String())
		}
		elems = append(elems, e)
	}
	return turnsBody(api, apiHeads[api], elems, apiTails[api])
}

// FuzzIncrementalDecode: a body that keeps any prefix of a previous body and
// continues with anything decodes incrementally exactly as it does alone, in
// every API.
func FuzzIncrementalDecode(f *testing.F) {
	for api, elems := range apiElems {
		prev := turnsBody(api, apiHeads[api], elems[:3], apiTails[api])
		next := turnsBody(api, apiHeads[api], elems, apiTails[api])
		keep := commonPrefixLen(prev, next)
		f.Add(prev, uint(keep), next[keep:])
		f.Add(prev, uint(keep-5), next[keep-5:])
		f.Add(prev, uint(keep), []byte(`,{"role":"user","content":"a"}],"Messages":[],"input":[{}]}`))
		f.Add(prev, uint(keep), []byte(`]}`))
		f.Add(prev, uint(keep), []byte(`,null]} `))
	}
	// Raw UTF-8: a body that parts from its previous one inside a character.
	ete := []byte(`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"été"}]}`)
	f.Add(ete, uint(bytes.IndexByte(ete, 0xc3)+1), []byte("(\"}]}"))
	f.Fuzz(func(t *testing.T, prevBody []byte, keep uint, tail []byte) {
		body := append(prevBody[:min(int(keep), len(prevBody)):min(int(keep), len(prevBody))], tail...)
		for api, dec := range apiDecoders {
			if _, prev := dec(prevBody, nil); prev != nil {
				checkIncremental(t, api, body, prev)
			}
		}
	})
}

// FuzzIncrementalDecodeChain: a session of three bodies, each keeping any
// prefix of the one before and continuing with anything, decodes each body
// with what the previous decode left (itself an incremental one) exactly as
// it decodes alone; a branch from the first body decoded after them changes
// neither what they returned nor what the next turn of either reuses.
func FuzzIncrementalDecodeChain(f *testing.F) {
	for api, elems := range apiElems {
		b0 := turnsBody(api, apiHeads[api], elems[:2], apiTails[api])
		b1 := turnsBody(api, apiHeads[api], elems[:4], apiTails[api])
		b2 := turnsBody(api, apiHeads[api], elems, apiTails[api])
		k1, k2 := commonPrefixLen(b0, b1), commonPrefixLen(b1, b2)
		f.Add(b0, uint(k1), b1[k1:], uint(k2), b2[k2:])
		f.Add(b0, uint(k1-3), b1[k1-3:], uint(k2-9), b2[k2-9:])
		f.Add(b0, uint(k1), b1[k1:], uint(len(b1)-1), []byte(`,"messages":[]}`))
	}
	f.Fuzz(func(t *testing.T, b0 []byte, keep1 uint, tail1 []byte, keep2 uint, tail2 []byte) {
		cut := func(b []byte, keep uint, tail []byte) []byte {
			n := min(int(keep), len(b))
			return append(b[:n:n], tail...)
		}
		b1 := cut(b0, keep1, tail1)
		b2 := cut(b1, keep2, tail2)
		for api, dec := range apiDecoders {
			_, p0 := dec(b0, nil)
			if p0 == nil {
				continue
			}
			d1, p1 := dec(b1, p0)
			var d2 decoded
			if p1 != nil {
				d2, _ = dec(b2, p1)
			}
			// A sibling of b1 from the same first body, and b1 again.
			sib, _ := dec(b2, p0)
			again, _ := dec(b1, p0)
			for _, c := range []struct {
				what string
				body []byte
				got  decoded
				ok   bool
			}{{"second", b1, d1, true}, {"third", b2, d2, p1 != nil}, {"branch", b2, sib, true}, {"second again", b1, again, true}} {
				if !c.ok {
					continue
				}
				full, _ := dec(c.body, nil)
				if diff := cmp.Diff(full, c.got, allowUnexported); diff != "" {
					t.Fatalf("%s: %s body (-full +incremental):\n%s\nbodies: %q\n%q\n%q", api, c.what, diff, b0, b1, b2)
				}
			}
		}
	})
}

// The scanner that finds the array is exact on every body encoding/json
// accepts.
func FuzzFindArray(f *testing.F) {
	for api, elems := range apiElems {
		f.Add(turnsBody(api, apiHeads[api], elems, apiTails[api]))
	}
	f.Add([]byte(` { "messages" : [ {} , null ,{"a":"]\"}"}] , "x" : -1.5e3 } `))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r struct {
			Messages []any `json:"messages"`
		}
		span, ok := findArray(body, "messages")
		if decodeJSON(body, &r) != nil || !ok {
			return
		}
		if len(span.ends) != len(r.Messages) || body[span.start] != '[' || body[span.end-1] != ']' {
			t.Fatalf("%q: span %+v for %d elements", body, span, len(r.Messages))
		}
		start := span.start + 1
		for i, end := range span.ends {
			var elem any
			if err := decodeJSON(body[start:end], &elem); err != nil || !cmp.Equal(elem, r.Messages[i]) {
				t.Fatalf("%q: element %d is %q", body, i, body[start:end])
			}
			start = end + 1 + bytes.IndexByte(body[end:], ',')
		}
	})
}
