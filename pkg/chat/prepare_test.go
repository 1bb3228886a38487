package chat

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
)

// randomStep changes c the way clients do between turns: mostly the
// assistant's answer and tool results appended, sometimes a run of tool
// results continued, a message edited, history cut, tools changed or a
// system message added in front.
func randomStep(r *rand.Rand, c *Conversation, turn int) {
	text := func() string {
		return strings.Repeat(fmt.Sprintf("word%d ", r.IntN(50)), r.IntN(12)) + []string{"", "\n", "日本語", " <|im_end|> "}[r.IntN(4)]
	}
	switch k := r.IntN(20); {
	case k < 10: // the usual agent turn
		c.Messages = append(c.Messages, Message{Role: RoleAssistant, Content: text(),
			ToolCalls: []ToolCall{{ID: fmt.Sprint(turn), Name: "read", Arguments: fmt.Sprintf(`{"p": %d}`, turn)}}},
			Message{Role: RoleTool, ToolCallID: fmt.Sprint(turn), Content: text()})
	case k < 12: // another tool result in the same run
		c.Messages = append(c.Messages, Message{Role: RoleTool, Content: text()})
	case k < 14:
		c.Messages = append(c.Messages, Message{Role: RoleUser, Content: text()})
	case k < 15 && len(c.Messages) > 0: // an edit in the history
		i := r.IntN(len(c.Messages))
		c.Messages = slices.Clone(c.Messages)
		c.Messages[i].Content += "edited"
	case k < 16 && len(c.Messages) > 1: // compaction
		c.Messages = slices.Clone(c.Messages[:1+r.IntN(len(c.Messages)-1)])
	case k < 17:
		if len(c.Tools) == 0 {
			c.Tools = []Tool{{Name: "read", Parameters: []byte(`{"type": "object"}`)}}
		} else {
			c.Tools = nil
		}
	case k < 18: // a system message in front (or taken away)
		if len(c.Messages) > 0 && c.Messages[0].Role == RoleSystem {
			c.Messages = slices.Clone(c.Messages[1:])
		} else {
			c.Messages = append([]Message{{Role: RoleSystem, Content: text()}}, c.Messages...)
		}
	default:
		c.Messages = append(c.Messages, Message{Role: RoleAssistant, Content: text()})
	}
}

// TestPrepareWarmEqualsCold is the differential test of incremental
// rendering: every turn's tokens and hashes equal those of rendering the
// whole conversation and preprocessing it cold, whatever happened to the
// conversation since the previous turn; and an agent's usual turn reuses
// its previous prompt.
func TestPrepareWarmEqualsCold(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "salt")
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		c := &Conversation{Messages: []Message{{Role: RoleUser, Content: "Fix the bug."}}}
		if seed%2 == 0 {
			c.Tools = []Tool{{Name: "read", Description: "reads", HasDescription: true}}
		}
		var prev *Session
		for turn := range 30 {
			p, err := ChatML{}.Render(c, true)
			if err != nil {
				t.Fatal(err)
			}
			cold, _ := Preprocess(tok, h, p, nil)
			warm, next, err := Prepare(ChatML{}, tok, h, c, prev)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cold.Tokens, warm.Tokens) || !slices.Equal(cold.Hashes, warm.Hashes) {
				t.Fatalf("seed %d turn %d: warm differs from cold\nwarm: %v\ncold: %v", seed, turn,
					warm.Tokens, cold.Tokens)
			}
			if got := append(slices.Clone(next.prompt), next.tail...); !cmp.Equal(got, p) {
				t.Fatalf("seed %d turn %d: prompt differs from Render's:\n%s", seed, turn, cmp.Diff(p, got))
			}
			if prev != nil && warm.ReusedTokens > commonPrefix(prev.tokens, warm.Tokens) {
				t.Fatalf("seed %d turn %d: reused %d tokens beyond the common prefix", seed, turn, warm.ReusedTokens)
			}
			prev = next
			randomStep(r, c, turn)
		}
	}
}

// TestPrepareDecodedSessions is the frontend's whole path for one session:
// each turn's Chat Completions body decoded with what the previous body left
// and prepared with the previous turn's Session, sharing their message lists
// (in place while a turn only appends), against the same body decoded and
// prepared cold. One turn in five branches from an earlier turn instead (a
// retry, a sub-agent from an old history), and every turn's result is checked
// again at the end: no later turn may change what an earlier one returned.
func TestPrepareDecodedSessions(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	type result struct {
		body []byte
		conv *Conversation
		tk   Tokenized
	}
	run := func(body []byte, from sessionState) (result, sessionState) {
		// Conversation, not CheckedConversation: random histories do not
		// pair their tool calls as OpenAI's rule asks (chatTurn checks).
		req, nb, err := DecodeChatCompletion(body, from.body)
		if err != nil {
			t.Fatal(err)
		}
		conv, err := req.Conversation()
		if err != nil {
			t.Fatal(err)
		}
		tk, ns, err := Prepare(ChatML{}, tok, h, conv, from.sess)
		if err != nil {
			t.Fatal(err)
		}
		return result{body, conv, tk}, sessionState{nb, ns}
	}
	check := func(seed uint64, turn int, got result) {
		t.Helper()
		cold, _ := run(got.body, sessionState{})
		if !cmp.Equal(cold.conv.Messages, got.conv.Messages) || !slices.Equal(cold.tk.Tokens, got.tk.Tokens) ||
			!slices.Equal(cold.tk.Hashes, got.tk.Hashes) {
			t.Fatalf("seed %d turn %d: warm differs from cold", seed, turn)
		}
	}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		c := &Conversation{Messages: []Message{{Role: RoleUser, Content: "Fix the bug."}}}
		states := []sessionState{{}}
		var results []result
		for turn := range 40 {
			from := states[len(states)-1]
			if r.IntN(5) == 0 {
				from = states[r.IntN(len(states))]
			}
			got, next := run(chatBody(t, c), from)
			check(seed, turn, got)
			results, states = append(results, got), append(states, next)
			randomStep(r, c, turn)
		}
		for turn, got := range results {
			check(seed, turn, got)
		}
	}
}

// TestPrepareReusesBlocks: an agent's usual next turn renders only its new
// blocks, and reuses all but the generation prompt's tokens.
func TestPrepareReusesBlocks(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	c := agentConversation(20_000)
	prevConv := &Conversation{Messages: c.Messages[:len(c.Messages)-2], Tools: c.Tools}
	_, prev, err := Prepare(ChatML{}, tok, h, prevConv, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _, kept, err := ChatML{}.extend(c, prev.chatML, prev.prompt)
	if err != nil {
		t.Fatal(err)
	}
	// The previous prompt's blocks end with "<|im_end|>", and "\n",
	// "<|im_start|>", "assistant\n" follow them: all its blocks are kept.
	if want := len(prev.prompt); kept != want || len(prev.tail) != 3 {
		t.Fatalf("kept %d of %d segments, want %d", kept, len(p), want)
	}
	tk, _, err := Prepare(ChatML{}, tok, h, c, prev)
	if err != nil {
		t.Fatal(err)
	}
	if tk.ReusedTokens < len(prev.tokens)-8 {
		t.Fatalf("reused %d of %d tokens", tk.ReusedTokens, len(prev.tokens))
	}
	// The next turn's answer begins with the generation prompt that ended
	// the previous prompt, so its tokens go after the previous turn's, in
	// the same array (preprocess's repeats).
	if &tk.Tokens[0] != &prev.tokens[0] {
		t.Error("an agent's next turn copied the previous turn's tokens instead of appending to them")
	}
	// A Session from another hasher is ignored.
	if tk, _, _ := Prepare(ChatML{}, tok, kvhash.New(16, "", "other"), c, prev); tk.ReusedTokens != 0 {
		t.Fatal("state of another salt reused")
	}
}

// TestPrepareOtherTemplates: a template without incremental rendering is
// rendered whole, and its segments still reused in place.
func TestPrepareOtherTemplates(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	tmpl, err := NewJinjaTemplate(tokenizer.DefaultChatTemplate(), isQwenSpecial, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := agentConversation(5_000)
	prevConv := &Conversation{Messages: c.Messages[:len(c.Messages)-2], Tools: c.Tools}
	_, prev, err := Prepare(tmpl, tok, h, prevConv, nil)
	if err != nil {
		t.Fatal(err)
	}
	warm, _, err := Prepare(tmpl, tok, h, c, prev)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tmpl.Render(c, true)
	if err != nil {
		t.Fatal(err)
	}
	cold, _ := Preprocess(tok, h, p, nil)
	if !slices.Equal(cold.Tokens, warm.Tokens) || !slices.Equal(cold.Hashes, warm.Hashes) {
		t.Fatal("warm differs from cold")
	}
	if warm.ReusedTokens < len(prev.tokens)/2 {
		t.Fatalf("reused %d of %d tokens", warm.ReusedTokens, len(prev.tokens))
	}
}

// TestPrepareBranches: two conversations appended to one list with room to
// spare (sub-agents branching from one history) do not change what the
// first one's Session holds.
func TestPrepareBranches(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	base := make([]Message, 1, 8)
	base[0] = Message{Role: RoleUser, Content: "u"}
	_, s1, err := Prepare(ChatML{}, tok, h, &Conversation{Messages: base}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, s2, err := Prepare(ChatML{}, tok, h, &Conversation{Messages: append(base, Message{Role: RoleAssistant, Content: "x"})}, s1)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(base, Message{Role: RoleAssistant, Content: "y"}) // the other branch
	c := &Conversation{Messages: []Message{{Role: RoleUser, Content: "u"}, {Role: RoleAssistant, Content: "y"}, {Role: RoleUser, Content: "z"}}}
	warm, _, err := Prepare(ChatML{}, tok, h, c, s2)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ChatML{}.Render(c, true)
	if cold, _ := Preprocess(tok, h, p, nil); !slices.Equal(warm.Tokens, cold.Tokens) {
		t.Fatalf("a branch's append changed the other's session:\nwarm %v\ncold %v", warm.Tokens, cold.Tokens)
	}
}

// TestPrepareAppendsInPlace: an agent's usual next turn (a tool call and
// its result appended) puts everything it adds after what the previous turn
// left, in the same arrays: the decoded elements and their ends, the
// normalised messages (an Anthropic body's with where each element's end),
// the rendered blocks and block ends, the segments' token ends, the tokens
// and the block hashes. Copying any of them again would make every turn's
// cost grow with the session's history (an array that is full grows into a
// new one, as append does).
func TestPrepareAppendsInPlace(t *testing.T) {
	tok, h := tokenizer.Default(), kvhash.New(16, "", "")
	// appended: b is in a's array, unless a's array had no room for it.
	appended := func(a, b any) bool {
		va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
		return va.Pointer() == vb.Pointer() || vb.Len() > va.Cap()
	}
	c := &Conversation{Messages: []Message{{Role: RoleSystem, Content: "sys"}, {Role: RoleUser, Content: "go"}}}
	elems := []string{`{"role":"user","content":"go"}`}
	for _, api := range []struct {
		name string
		turn turnOf
		grow func(n int)
		body func() []byte
	}{
		{"chat", chatTurn(tok, h), func(n int) {
			call := fmt.Sprintf("call_%d_0", len(c.Messages))
			c.Messages = append(c.Messages, Message{Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "grep", Arguments: `{"p":1}`}}},
				Message{Role: RoleTool, ToolCallID: call, Content: fmt.Sprintf("result %d", n)})
		}, func() []byte { return chatBody(t, c) }},
		{"messages", messagesTurn(tok, h), func(n int) {
			elems = append(elems, fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"t%d","name":"Grep","input":{}}]}`, n),
				fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"result %d"}]}`, n, n))
		}, func() []byte {
			return turnsBody("messages", `"model":"claude","max_tokens":9,`, elems, `,"system":"You are Claude Code."`)
		}},
	} {
		var prev sessionState
		for n := range 6 {
			_, _, next, err := api.turn(api.body(), prev)
			if err != nil {
				t.Fatal(err)
			}
			if n > 1 { // the first turn after a whole decode copies once
				pb, nb, s, ns := prev.body, next.body, prev.sess, next.sess
				for name, pair := range map[string][2]any{
					"elements": {pb.elems, nb.elems}, "element ends": {pb.span.ends, nb.span.ends}, "messages": {pb.norms, nb.norms},
					"blocks": {s.prompt, ns.prompt}, "block ends": {s.chatML.marks, ns.chatML.marks}, "token ends": {s.ends, ns.ends},
					"tokens": {s.tokens, ns.tokens}, "hashes": {s.hashes, ns.hashes},
				} {
					if !appended(pair[0], pair[1]) {
						t.Errorf("%s turn %d: the %s were copied, not appended to", api.name, n, name)
					}
				}
				if api.name == "messages" && !appended(pb.normEnds, nb.normEnds) {
					t.Errorf("%s turn %d: the messages' ends were copied, not appended to", api.name, n)
				}
			}
			prev = next
			api.grow(n)
		}
	}
}

// TestPrepareEditThenBranch: turns from one Session, one after another: an
// edit of its history after an early block, a turn that keeps the whole
// history and appends (in place), then a retry of the Session's own turn,
// whose prompt is the Session's again: each must find the Session's blocks,
// block ends, generation prompt and token ends as they were, whatever the
// turns before it appended to the arrays.
func TestPrepareEditThenBranch(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	u := func(s string) Message { return Message{Role: RoleUser, Content: s} }
	base := []Message{u("u1"), {Role: RoleAssistant, Content: "a1"}, {Role: RoleTool, Content: "t1"}, {Role: RoleTool, Content: "t2"}, u("u2")}
	_, s0, err := Prepare(ChatML{}, tok, h, &Conversation{Messages: slices.Clone(base)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Conversation{
		{Messages: []Message{base[0], base[1], u("u9"), u("u10")}}, // the edit
		{Messages: append(slices.Clone(base), u("u3"))},            // the branch
		{Messages: slices.Clone(base)},                             // the retry
	} {
		warm, _, err := Prepare(ChatML{}, tok, h, c, s0)
		if err != nil {
			t.Fatal(err)
		}
		cold, _, _ := Prepare(ChatML{}, tok, h, c, nil)
		if !slices.Equal(warm.Tokens, cold.Tokens) {
			t.Fatalf("%d messages: warm differs from cold", len(c.Messages))
		}
	}
}

// TestPrepareConcurrentBranches prepares turns that continue one Session at
// once (sub-agents of one history, a retry racing its original), some of
// them with nothing new to render: one appends in place, the others copy,
// and each equals a cold preparation. Under the race detector it also checks
// that no turn writes where another still reads.
func TestPrepareConcurrentBranches(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	c := agentConversation(10_000)
	var s *Session
	for _, n := range []int{len(c.Messages) - 4, len(c.Messages) - 2} {
		var err error
		if _, s, err = Prepare(ChatML{}, tok, h, &Conversation{Messages: c.Messages[:n], Tools: c.Tools}, s); err != nil {
			t.Fatal(err)
		}
	}
	branch := func(i int) *Conversation {
		msgs := slices.Clone(c.Messages[:len(c.Messages)-2])
		switch i % 3 {
		case 0: // nothing new
		case 1:
			msgs = append(msgs, Message{Role: RoleUser, Content: fmt.Sprintf("branch %d", i)})
		default:
			msgs = append(msgs, c.Messages[len(c.Messages)-2:]...)
			msgs = append(msgs, Message{Role: RoleAssistant, Content: strings.Repeat(fmt.Sprintf("answer %d ", i), 40)})
		}
		return &Conversation{Messages: msgs, Tools: c.Tools}
	}
	const n = 12
	got := make([]Tokenized, n)
	done := make(chan struct{})
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			tk, _, err := Prepare(ChatML{}, tok, h, branch(i), s)
			if err != nil {
				t.Error(err)
			}
			got[i] = tk
		}()
	}
	for range n {
		<-done
	}
	for i := range n {
		cold, _, err := Prepare(ChatML{}, tok, h, branch(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cold.Tokens, got[i].Tokens) || !slices.Equal(cold.Hashes, got[i].Hashes) {
			t.Errorf("branch %d: warm differs from cold", i)
		}
	}
}

// A session's next prompt is appended into its previous prompt's arrays; a
// second turn from the same Session (a branch) gets arrays of its own, and
// neither changes what the other, or the Session they came from, holds.
func TestPreprocessAppendsInPlaceOnlyOnce(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	seg := func(words int, seed string) Segment {
		return Segment{Text: strings.Repeat(seed+" word ", words)}
	}
	a := Prompt{seg(40, "system"), {Text: "<|im_end|>", Special: true}}
	t0, s0 := Preprocess(tok, h, a, nil)
	before := slices.Clone(t0.Tokens)
	// Short turns: they fit in the room the first array was made with.
	b := append(slices.Clone(a), seg(3, "bee"))
	c := append(slices.Clone(a), seg(5, "sea"))
	d := append(slices.Clone(b), seg(2, "dee"))
	t1, s1 := Preprocess(tok, h, b, s0)
	t2, _ := Preprocess(tok, h, c, s0) // the branch
	t3, _ := Preprocess(tok, h, d, s1)
	for _, tt := range []struct {
		name string
		p    Prompt
		got  Tokenized
	}{{"first", a, t0}, {"appended", b, t1}, {"branch", c, t2}, {"appended again", d, t3}} {
		cold, _ := Preprocess(tok, h, tt.p, nil)
		if !slices.Equal(tt.got.Tokens, cold.Tokens) || !slices.Equal(tt.got.Hashes, cold.Hashes) {
			t.Errorf("%s: warm tokens or hashes differ from a cold run", tt.name)
		}
	}
	if !slices.Equal(t0.Tokens, before) {
		t.Error("a later turn changed the first turn's tokens")
	}
	if &t1.Tokens[0] != &t0.Tokens[0] || &t3.Tokens[0] != &t0.Tokens[0] {
		t.Error("a turn that only appends copied its tokens instead of appending in place")
	}
	if &t2.Tokens[0] == &t0.Tokens[0] {
		t.Error("the branch appended into the array another turn had already appended to")
	}
}
