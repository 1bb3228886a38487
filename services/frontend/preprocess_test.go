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

// TestIncrementalPreprocessOverFixtures replays each captured session turn by
// turn through the API decoders and the default template, and checks that
// session-incremental preprocessing gives exactly the cold result, and that
// later turns of a session reuse most of the previous prompt.
func TestIncrementalPreprocessOverFixtures(t *testing.T) {
	tok := tokenizer.Default()
	h := kvhash.New(16, "", "")
	prev := map[string]*chat.Session{}
	reusedTurns := 0
	for _, fx := range loadFixtures(t) {
		if fx.Method != http.MethodPost {
			continue
		}
		var conv *chat.Conversation
		var err error
		switch {
		case strings.HasPrefix(fx.Path, "/v1/chat/completions"):
			var r *chat.ChatCompletionRequest
			if r, _, err = chat.DecodeChatCompletion(fx.Body, nil); err == nil {
				conv, err = r.Conversation()
			}
		case strings.HasPrefix(fx.Path, "/v1/messages"):
			var r *chat.MessagesRequest
			if r, _, err = chat.DecodeMessages(fx.Body, true, nil); err == nil {
				conv, err = r.Conversation(true)
			}
		case strings.HasPrefix(fx.Path, "/v1/responses"):
			var r *chat.ResponsesRequest
			if r, _, err = chat.DecodeResponses(fx.Body, nil); err == nil {
				conv, _, err = r.Conversation()
			}
		default:
			continue
		}
		if err != nil {
			t.Fatalf("%s %s: %v", fx.Scenario, fx.Path, err)
		}
		p, err := chat.ChatML{}.Render(conv, true)
		if err != nil {
			t.Fatal(err)
		}
		key := fx.Scenario + "/" + expectedSession(fx)
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
	if reusedTurns < 10 {
		t.Fatalf("only %d turns reused their session's previous prompt", reusedTurns)
	}
}
