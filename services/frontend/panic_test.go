package frontend

import (
	"encoding/json"
	"testing"

	"switchyard.dev/pkg/chat"
)

type panickyTemplate struct{}

func (panickyTemplate) Render(*chat.Conversation, bool) (chat.Prompt, error) { panic("template bug") }

// A bug that panics inside a handler reaches the client as a 500 in the
// API's own error shape, never as a dropped connection.
func TestPanicBecomesAPIError(t *testing.T) {
	m := newMesh(t, nil)
	m.svc.template = panickyTemplate{}
	for path, body := range map[string]string{
		"/v1/chat/completions": turn1,
		"/v1/messages":         `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		resp := post(t, m.url+path, body)
		var e map[string]any
		if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &e); err != nil || resp.StatusCode != 500 || e["error"] == nil {
			t.Fatalf("%s: %d %v %v", path, resp.StatusCode, e, err)
		}
	}
}
