package frontend

import (
	"encoding/json"
	"strings"
	"testing"

	"switchyard.dev/pkg/chat"
)

func TestStopSequences(t *testing.T) {
	m := newMesh(t, nil)
	resp := post(t, m.url+"/v1/chat/completions", strings.Replace(turn1, `"messages"`, `"stop":["agent","zzz"],"messages"`, 1))
	var cc chat.ChatCompletion
	json.Unmarshal([]byte(readAll(t, resp.Body)), &cc)
	if c := cc.Choices[0]; c.Message.Content == nil || *c.Message.Content != " Hello there, " || c.FinishReason != "stop" || cc.Usage.CompletionTokens == 0 {
		t.Fatalf("chat: %+v", cc)
	}
	m.waitFinish(t)
	// Streamed Anthropic: stop_reason stop_sequence with the sequence.
	resp = post(t, m.url+"/v1/messages", `{"model":"m","max_tokens":50,"stream":true,"stop_sequences":["All"],"messages":[{"role":"user","content":"hi"}]}`)
	events, datas := sseEvents(t, resp.Body)
	var text strings.Builder
	var delta struct {
		Delta struct {
			Text         string  `json:"text"`
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
	}
	for i, d := range datas {
		json.Unmarshal([]byte(d), &delta)
		if events[i] == "content_block_delta" {
			text.WriteString(delta.Delta.Text)
		}
	}
	json.Unmarshal([]byte(datas[len(datas)-2]), &delta)
	if text.String() != " Hello there, agent. " || delta.Delta.StopReason != "stop_sequence" || delta.Delta.StopSequence == nil || *delta.Delta.StopSequence != "All" {
		t.Fatalf("messages: %q %+v", text.String(), delta)
	}
	m.waitFinish(t)
	resp = post(t, m.url+"/v1/chat/completions", strings.Replace(turn1, `"messages"`, `"stop":7,"messages"`, 1))
	if readAll(t, resp.Body); resp.StatusCode != 400 {
		t.Fatalf("bad stop: %d", resp.StatusCode)
	}
}
