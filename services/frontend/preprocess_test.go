package frontend

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
)

// decodeFixture decodes a captured body of any API, reusing what prev (the
// session's previous body) left, into the request and its conversation.
func decodeFixture(fx fixture, prev *chat.PrevBody) (req any, conv *chat.Conversation, next *chat.PrevBody, err error) {
	switch {
	case strings.HasPrefix(fx.Path, "/v1/chat/completions"):
		var r *chat.ChatCompletionRequest
		if r, next, err = chat.DecodeChatCompletion(fx.Body, prev); err == nil {
			req = r
			conv, err = r.Conversation()
		}
	case strings.HasPrefix(fx.Path, "/v1/messages"):
		var r *chat.MessagesRequest
		if r, next, err = chat.DecodeMessages(fx.Body, true, prev); err == nil {
			req = r
			conv, err = r.Conversation(true)
		}
	case strings.HasPrefix(fx.Path, "/v1/responses"):
		var r *chat.ResponsesRequest
		if r, next, err = chat.DecodeResponses(fx.Body, prev); err == nil {
			req = r
			conv, _, err = r.Conversation()
		}
	}
	return req, conv, next, err
}

// TestIncrementalPreprocessOverFixtures replays each captured session turn by
// turn through the API decoders and the default template, and checks that
// session-incremental decoding and preprocessing give exactly the cold
// results, and that later turns of a session reuse most of the previous
// body's messages and prompt.
func TestIncrementalPreprocessOverFixtures(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	prev := map[string]*chat.Session{}
	prevBody := map[string]*chat.PrevBody{}
	reusedTurns, reusedBodies := 0, 0
	unexported := cmp.AllowUnexported(chat.AnthropicMessage{}, chat.ResponsesRequest{}, chat.ChatMessage{},
		chat.ChatCompletionRequest{}, chat.MessagesRequest{}, chat.Conversation{})
	for _, fx := range loadFixtures(t) {
		if fx.Method != http.MethodPost {
			continue
		}
		key := fx.Scenario + "/" + expectedSession(fx)
		req, conv, _, err := decodeFixture(fx, nil)
		if conv == nil && err == nil {
			continue // not an inference API
		}
		if err != nil {
			t.Fatalf("%s %s: %v", fx.Scenario, fx.Path, err)
		}
		warmReq, warmConv, nextBody, err := decodeFixture(fx, prevBody[key])
		if err != nil || !cmp.Equal(req, warmReq, unexported) || !cmp.Equal(conv, warmConv, unexported) {
			t.Fatalf("%s %s: incremental decode differs from the full one (%v)", fx.Scenario, fx.Run, err)
		}
		if nextBody != nil && nextBody.Reused() > 0 {
			reusedBodies++
		}
		prevBody[key] = nextBody
		p, err := chat.ChatML{}.Render(conv, true)
		if err != nil {
			t.Fatal(err)
		}
		cold, _ := chat.Preprocess(tok, h, p, nil)
		warm, next := chat.Preprocess(tok, h, p, prev[key])
		if !cmp.Equal(cold.Tokens, warm.Tokens) || !cmp.Equal(cold.Hashes, warm.Hashes) {
			t.Fatalf("%s %s: warm differs from cold", fx.Scenario, fx.Run)
		}
		if prev[key] != nil && warm.ReusedTokens > len(prev[key].Tokens())/2 {
			reusedTurns++
		}
		prev[key] = next
	}
	if reusedTurns < 10 || reusedBodies < 10 {
		t.Fatalf("only %d turns reused their session's previous prompt, %d its previous body", reusedTurns, reusedBodies)
	}
	t.Logf("%d turns reused their session's previous prompt, %d its previous body", reusedTurns, reusedBodies)
}
