package frontend

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/tokenizer"
)

// thinkingMesh's engine answers as Qwen3 does when it thinks: <think> and
// </think> are the added tokens, framed by newlines.
func thinkingMesh(t *testing.T) *mesh {
	return newMesh(t, func(_ *Config, sh *fakeShim) {
		sh.answer = tokenizer.Default().Encode("<think>\nThe user wants a greeting.\n</think>\n\nHello there, agent.")
	})
}

const (
	wantThinking = "The user wants a greeting."
	wantAnswer   = "Hello there, agent."
)

func TestReasoningChat(t *testing.T) {
	m := thinkingMesh(t)
	resp := post(t, m.url+"/v1/chat/completions", turn1)
	var cc chat.ChatCompletion
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &cc); err != nil {
		t.Fatal(err)
	}
	m.waitFinish(t)
	msg := cc.Choices[0].Message
	if msg.ReasoningContent == nil || *msg.ReasoningContent != wantThinking || msg.Content == nil || *msg.Content != wantAnswer {
		t.Fatalf("message = %+v", msg)
	}

	resp = post(t, m.url+"/v1/chat/completions", streamTurn1)
	_, datas := sseEvents(t, resp.Body)
	m.waitFinish(t)
	var reasoning, content strings.Builder
	for _, d := range datas {
		if d == "[DONE]" {
			continue
		}
		var ch chat.ChatCompletionChunk
		if err := json.Unmarshal([]byte(d), &ch); err != nil {
			t.Fatal(err)
		}
		if len(ch.Choices) == 0 {
			continue
		}
		if r := ch.Choices[0].Delta.ReasoningContent; r != nil {
			if content.Len() > 0 {
				t.Fatal("reasoning after content")
			}
			reasoning.WriteString(*r)
		}
		if c := ch.Choices[0].Delta.Content; c != nil {
			content.WriteString(*c)
		}
	}
	if reasoning.String() != wantThinking || content.String() != wantAnswer {
		t.Fatalf("streamed (%q, %q)", reasoning.String(), content.String())
	}
}

func TestReasoningResponses(t *testing.T) {
	m := thinkingMesh(t)
	evs := streamResponses(t, m, `{"model":"m","stream":true,"input":"Say hello"}`)
	m.waitFinish(t)
	want := "created in_progress output_item.added content_part.added reasoning_text.delta"
	if got := types(evs); !strings.HasPrefix(got, want) || !strings.Contains(got, "reasoning_text.done content_part.done output_item.done output_item.added") {
		t.Fatalf("events: %s", got)
	}
	last := evs[len(evs)-1]
	if last.Type != "response.completed" || len(last.Response.Output) != 2 {
		t.Fatalf("last event %+v", last)
	}
	var rs reasoningItem
	if err := json.Unmarshal(last.Response.Output[0], &rs); err != nil {
		t.Fatal(err)
	}
	var msg messageItem
	if err := json.Unmarshal(last.Response.Output[1], &msg); err != nil {
		t.Fatal(err)
	}
	if rs.Type != "reasoning" || len(rs.Content) != 1 || rs.Content[0].Text != wantThinking || msg.Content[0].Text != wantAnswer {
		t.Fatalf("output: %+v %+v", rs, msg)
	}
}

func TestReasoningAnthropicSDK(t *testing.T) {
	m := thinkingMesh(t)
	client := anthropicClient(m)
	params := anthropic.MessageNewParams{Model: "claude-x", MaxTokens: 200,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello"))}}
	msg := streamMessage(t, m, client, params)
	if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != wantThinking ||
		msg.Content[1].Type != "text" || msg.Content[1].Text != wantAnswer {
		t.Fatalf("streamed message: %+v", msg.Content)
	}
	full, err := client.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	m.waitFinish(t)
	if len(full.Content) != 2 || full.Content[0].Type != "thinking" || full.Content[0].Thinking != wantThinking || full.Content[1].Text != wantAnswer {
		t.Fatalf("message: %+v", full.Content)
	}
}
