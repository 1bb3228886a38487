package chat

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
)

// chatBody is c as the Chat Completions body an agent harness would send.
func chatBody(tb testing.TB, c *Conversation) []byte {
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type call struct {
		ID       string           `json:"id"`
		Type     string           `json:"type"`
		Function ChatFunctionCall `json:"function"`
	}
	type msg struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCalls  []call `json:"tool_calls,omitempty"`
		ToolCallID string `json:"tool_call_id,omitempty"`
	}
	body := struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []msg  `json:"messages"`
		Tools    []tool `json:"tools"`
	}{Model: "m", Stream: true}
	for i, m := range c.Messages {
		wm := msg{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for j, tc := range m.ToolCalls {
			wm.ToolCalls = append(wm.ToolCalls, call{ID: fmt.Sprintf("call_%d_%d", i, j), Type: "function",
				Function: ChatFunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
		}
		body.Messages = append(body.Messages, wm)
	}
	for _, t := range c.Tools {
		body.Tools = append(body.Tools, tool{"function", fn{t.Name, t.Description, t.Parameters}})
	}
	b, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkAgentTurn is the frontend's whole preprocessing of one agent turn
// of about 100k tokens (also 10k): decode the Chat Completions body,
// normalise, render the default template, tokenize and hash the blocks.
// Cold has no session state; warm has the state the session's previous turn
// (the same conversation without its last tool call and result) left: its
// decoded body, its rendered blocks and its tokens. warm-fulldecode has only the tokens and
// decodes the whole body, as every turn did before bodies were decoded
// incrementally.
// Besides ns/op it reports the median and p90 of the per-turn wall time
// (p50-ms, p90-ms) and the median thread CPU time (cpu-p50-ms), which on a
// loaded machine separates work from waiting for a core.
func BenchmarkAgentTurn(b *testing.B) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	for _, size := range []int{10_000, 100_000} {
		c := agentConversation(size)
		body := chatBody(b, c)
		prevConv := &Conversation{Messages: c.Messages[:len(c.Messages)-2], Tools: c.Tools}
		// The previous turn as the frontend saw it: decoded from its body.
		prevReq, prevBody, err := DecodeChatCompletion(chatBody(b, prevConv), nil)
		if err != nil || prevBody == nil {
			b.Fatal("previous body: ", err)
		}
		prevDecoded, err := prevReq.Conversation()
		if err != nil {
			b.Fatal(err)
		}
		_, prevState, err := Prepare(ChatML{}, tok, h, prevDecoded, nil)
		if err != nil {
			b.Fatal(err)
		}
		turn := func(prev *Session, prevBody *PrevBody) (Tokenized, error) {
			req, _, err := DecodeChatCompletion(body, prevBody)
			if err != nil {
				return Tokenized{}, err
			}
			conv, err := req.Conversation()
			if err != nil {
				return Tokenized{}, err
			}
			tk, _, err := Prepare(ChatML{}, tok, h, conv, prev)
			return tk, err
		}
		cold, err := turn(nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []struct {
			name     string
			prev     *Session
			prevBody *PrevBody
		}{{"cold", nil, nil}, {"warm", prevState, prevBody}, {"warm-fulldecode", prevState, nil}} {
			b.Run(fmt.Sprintf("%s/%dk", mode.name, size/1000), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var wall, cpu []time.Duration
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					c0, okCPU := threadCPU()
					t0 := time.Now()
					tk, err := turn(mode.prev, mode.prevBody)
					wall = append(wall, time.Since(t0))
					if c1, ok := threadCPU(); ok && okCPU {
						cpu = append(cpu, time.Duration(c1-c0))
					}
					if err != nil || len(tk.Tokens) != len(cold.Tokens) {
						b.Fatalf("turn: %v, %d tokens (want %d)", err, len(tk.Tokens), len(cold.Tokens))
					}
				}
				b.ReportMetric(quantileMS(wall, 0.5), "p50-ms")
				b.ReportMetric(quantileMS(wall, 0.9), "p90-ms")
				if len(cpu) > 0 {
					b.ReportMetric(quantileMS(cpu, 0.5), "cpu-p50-ms")
				}
				b.ReportMetric(float64(len(cold.Tokens)), "prompt-tokens")
			})
		}
	}
}

// quantileMS is the q-quantile of ds in milliseconds (nearest rank).
func quantileMS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return float64(s[i]) / float64(time.Millisecond)
}

// BenchmarkCheckToolMessages is the check of a Chat Completions request's
// tool calls and results (OpenAI's pairing rule), which runs on the whole
// history at every turn, for an agent conversation of about 100k tokens.
func BenchmarkCheckToolMessages(b *testing.B) {
	c := agentConversation(100_000)
	for i := range c.Messages {
		if c.Messages[i].Role == RoleTool { // answering the call before it, as chatBody names it
			c.Messages[i].ToolCallID = fmt.Sprintf("call_%d_0", i-1)
		}
	}
	req, _, err := DecodeChatCompletion(chatBody(b, c), nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := req.checkToolMessages(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(req.Messages)), "messages")
}

// sessionState is what one turn of a session leaves the frontend for the
// next: the decoded body and the prepared prompt.
type sessionState struct {
	body *PrevBody
	sess *Session
}

// turnOf is the frontend's preprocessing of one body of a session, from
// what the session's previous turn left (the zero state for none).
type turnOf func(body []byte, prev sessionState) (*Conversation, Tokenized, sessionState, error)

// chatTurn is turnOf for Chat Completions bodies.
func chatTurn(tok Encoder, h kvhash.Hasher) turnOf {
	return func(body []byte, prev sessionState) (*Conversation, Tokenized, sessionState, error) {
		req, nb, err := DecodeChatCompletion(body, prev.body)
		if err != nil {
			return nil, Tokenized{}, sessionState{}, err
		}
		conv, err := req.CheckedConversation()
		if err != nil {
			return nil, Tokenized{}, sessionState{}, err
		}
		tk, ns, err := Prepare(ChatML{}, tok, h, conv, prev.sess)
		return conv, tk, sessionState{nb, ns}, err
	}
}

// messagesTurn is turnOf for Anthropic Messages bodies.
func messagesTurn(tok Encoder, h kvhash.Hasher) turnOf {
	return func(body []byte, prev sessionState) (*Conversation, Tokenized, sessionState, error) {
		req, nb, err := DecodeMessages(body, true, prev.body)
		if err != nil {
			return nil, Tokenized{}, sessionState{}, err
		}
		conv, err := req.CheckedConversation(true)
		if err != nil {
			return nil, Tokenized{}, sessionState{}, err
		}
		tk, ns, err := Prepare(ChatML{}, tok, h, conv, prev.sess)
		return conv, tk, sessionState{nb, ns}, err
	}
}

// benchSession runs b.N turns of bodies, a session's successive bodies:
// chains of len(bodies)-1 turns, each from a fresh state (the first body's,
// set up untimed), each turn from the state its predecessor left, as the
// frontend's session table hands it on. cpu-us/turn is the thread's CPU
// time per turn.
func benchSession(b *testing.B, bodies [][]byte, turn turnOf) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	turns := 0
	for turns < b.N {
		b.StopTimer()
		_, _, st, err := turn(bodies[0], sessionState{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		c0, _ := threadCPU()
		for i := 1; i < len(bodies) && turns < b.N; i++ {
			if _, _, st, err = turn(bodies[i], st); err != nil {
				b.Fatal(err)
			}
			turns++
		}
		c1, _ := threadCPU()
		cpu += time.Duration(c1 - c0)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(turns), "cpu-us/turn")
}

// sessionChain is the bodies of chain+1 turns of a session whose history
// has about msgs messages: body renders the history, and grow(i) appends
// a turn's messages to it.
func sessionChain(msgs, chain int, length func() int, grow func(i int), body func() []byte) [][]byte {
	for i := 0; length() < msgs; i++ {
		grow(i)
	}
	base := length()
	bodies := make([][]byte, chain+1)
	for i := range bodies {
		bodies[i] = body()
		grow(base + i)
	}
	return bodies
}

// BenchmarkAgentSession is the frontend's preprocessing of an agent
// session's successive turns (decode the body, check and normalise it,
// render, tokenize and hash) when the history already has many messages:
// each turn adds a tool call and its short result, as agents that read and
// grep a lot do, so the work proportional to the new messages is small and
// whatever a turn does for every message of the history shows.
func BenchmarkAgentSession(b *testing.B) {
	turn := chatTurn(tokenizer.Default(), kvhash.New(16, "", ""))
	for _, msgs := range []int{100, 1000} {
		c := &Conversation{Messages: []Message{{Role: RoleSystem, Content: "You are a coding agent."},
			{Role: RoleUser, Content: "Find where the router drops stale requests."}}}
		bodies := sessionChain(msgs, 64, func() int { return len(c.Messages) }, func(i int) {
			// The result answers the call before it, as chatBody names it.
			call := fmt.Sprintf("call_%d_0", len(c.Messages))
			c.Messages = append(c.Messages,
				Message{Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "grep", Arguments: fmt.Sprintf(`{"pattern":"stale%d"}`, i)}}},
				Message{Role: RoleTool, ToolCallID: call, Content: fmt.Sprintf("pkg/routing/load.go:%d: // stale request %d dropped", 100+i, i)})
		}, func() []byte { return chatBody(b, c) })
		b.Run(fmt.Sprintf("messages=%d", msgs), func(b *testing.B) { benchSession(b, bodies, turn) })
	}
}

// BenchmarkAgentSessionMessages is BenchmarkAgentSession for the Anthropic
// Messages API, as Claude Code sends it: each turn adds an assistant
// message with a tool_use block and a user message with its tool_result,
// and moves the cache_control marker to the newest message (so the
// previous newest one is decoded again).
func BenchmarkAgentSessionMessages(b *testing.B) {
	turn := messagesTurn(tokenizer.Default(), kvhash.New(16, "", ""))
	for _, msgs := range []int{100, 1000} {
		elems := []string{`{"role":"user","content":[{"type":"text","text":"Find where the router drops stale requests."}]}`}
		bodies := sessionChain(msgs, 64, func() int { return len(elems) }, func(i int) {
			elems = append(elems,
				fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"t%d","name":"Grep","input":{"pattern":"stale%d"}}]}`, i, i),
				fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"pkg/routing/load.go:%d: // stale request %d dropped"}]}`, i, 100+i, i))
		}, func() []byte {
			marked := slices.Clone(elems)
			last := marked[len(marked)-1]
			marked[len(marked)-1] = strings.TrimSuffix(last, "}]}") + `,"cache_control":{"type":"ephemeral"}}]}`
			return turnsBody("messages", `"model":"claude","max_tokens":32000,"stream":true,`, marked, `,"system":[{"type":"text","text":"You are Claude Code."}]`)
		})
		b.Run(fmt.Sprintf("messages=%d", msgs), func(b *testing.B) { benchSession(b, bodies, turn) })
	}
}
