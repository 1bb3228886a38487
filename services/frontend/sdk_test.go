package frontend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// The official SDKs are the clients harnesses are built on: their stream
// decoders and accumulators must accept what the frontend sends.

// openAIClient is an OpenAI SDK client of m that names its session in
// header.
func openAIClient(m *mesh, header, session string) openai.Client {
	return openai.NewClient(option.WithBaseURL(m.url+"/v1/"), option.WithAPIKey("unused"),
		option.WithHeader(header, session), option.WithMaxRetries(0))
}

// anthropicClient is an Anthropic SDK client of m.
func anthropicClient(m *mesh, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(m.url + "/"), aoption.WithAPIKey("unused"),
		aoption.WithMaxRetries(0)}, opts...)...)
}

// streamMessage streams a message through the Anthropic SDK, accumulated as
// Claude Code accumulates it, and waits for the turn to finish.
func streamMessage(t *testing.T, m *mesh, client anthropic.Client, params anthropic.MessageNewParams) anthropic.Message {
	t.Helper()
	stream := client.Messages.NewStreaming(context.Background(), params)
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	m.waitFinish(t)
	return msg
}

func TestOpenAISDKChatToolLoop(t *testing.T) {
	m := toolMesh(t)
	client := openAIClient(m, "x-session-id", "ses_sdk")
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "switchyard-sim",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a coding agent. You read files with the read tool before answering."),
			openai.UserMessage("Read hello.txt and then greet me warmly, please."),
		},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "read", Description: openai.String("Read a file"),
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"path": map[string]string{"type": "string"}}, "required": []string{"path"}},
		})},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	run := func() openai.ChatCompletion {
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		m.waitFinish(t)
		return acc.ChatCompletion
	}
	first := run()
	if len(first.Choices) != 1 || first.Choices[0].FinishReason != "tool_calls" || len(first.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("turn 1: %+v", first.Choices)
	}
	call := first.Choices[0].Message.ToolCalls[0]
	if call.Function.Name != "read" || call.Function.Arguments != `{"path":""}` {
		t.Fatalf("call %+v", call)
	}
	params.Messages = append(params.Messages, first.Choices[0].Message.ToParam(), openai.ToolMessage("hello from the probe file", call.ID))
	second := run()
	if second.Choices[0].FinishReason != "stop" || !strings.Contains(second.Choices[0].Message.Content, "Hello there") {
		t.Fatalf("turn 2: %+v", second.Choices)
	}
	if second.Usage.PromptTokensDetails.CachedTokens == 0 || second.Usage.PromptTokens <= first.Usage.PromptTokens {
		t.Fatalf("turn 2 usage %+v (turn 1 %+v)", second.Usage, first.Usage)
	}
	// Non-streamed, through the SDK too.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	cc, err := client.Chat.Completions.New(ctx, params)
	if err != nil || cc.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatalf("non-streamed: %v %+v", err, cc)
	}
	m.waitFinish(t)
	// An invalid session id is an *openai.Error with status 400.
	_, err = client.Chat.Completions.New(ctx, params, option.WithHeader("x-session-id", strings.Repeat("z", 300)))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenAISDKResponses(t *testing.T) {
	m := toolMesh(t)
	client := openAIClient(m, "thread-id", "th-sdk")
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model: "switchyard-sim",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("You are Codex, a coding agent; use tools to inspect files.", responses.EasyInputMessageRoleDeveloper),
			responses.ResponseInputItemParamOfMessage("Read hello.txt, then say hi to me.", responses.EasyInputMessageRoleUser),
		}},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("exec_command",
			map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]string{"type": "string"}}, "required": []string{"cmd"}}, false)},
		Store: openai.Bool(false),
	}
	stream := client.Responses.NewStreaming(ctx, params)
	var final responses.Response
	var kinds []string
	for stream.Next() {
		ev := stream.Current()
		kinds = append(kinds, ev.Type)
		if ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	m.waitFinish(t)
	if final.Status != "completed" || len(final.Output) != 2 || final.Output[1].Type != "function_call" || final.Output[1].Name != "exec_command" {
		t.Fatalf("events %v final %+v", kinds, final.Output)
	}
	call := final.Output[1]
	params.Input.OfInputItemList = append(params.Input.OfInputItemList,
		responses.ResponseInputItemParamOfFunctionCall(call.Arguments.OfString, call.CallID, call.Name),
		responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String(call.CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("hi there")}}})
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	m.waitFinish(t)
	if resp.Status != "completed" || !strings.Contains(resp.OutputText(), "Hello there") || resp.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Fatalf("turn 2: %+v", resp)
	}
}

func TestAnthropicSDKToolUse(t *testing.T) {
	m := toolMesh(t)
	client := anthropicClient(m, aoption.WithHeader("X-Claude-Code-Session-Id", "cc-sdk"))
	params := anthropic.MessageNewParams{
		Model:     "claude-x",
		MaxTokens: 200,
		System:    []anthropic.TextBlockParam{{Text: "x-anthropic-billing-header: cc_version=2.1.197.e12; cch=00001;"}, {Text: "You are Claude Code. Read files with the Read tool."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Read hello.txt, then say hi."))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Read", Description: anthropic.String("Read a file"),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"file_path": map[string]string{"type": "string"}}, Required: []string{"file_path"}}}}},
	}
	first := streamMessage(t, m, client, params)
	if first.StopReason != anthropic.StopReasonToolUse || len(first.Content) != 2 || first.Content[1].Type != "tool_use" || first.Content[1].Name != "Read" {
		t.Fatalf("turn 1: %+v", first)
	}
	params.System[0].Text = "x-anthropic-billing-header: cc_version=2.1.197.e12; cch=00002;"
	params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(first.Content[1].ID, "hello from the probe file", false)))
	second := streamMessage(t, m, client, params)
	if second.StopReason != anthropic.StopReasonEndTurn || second.Usage.CacheReadInputTokens == 0 || second.Usage.InputTokens == 0 {
		t.Fatalf("turn 2: %+v", second)
	}
	count, err := client.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: "claude-x",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
	if err != nil || count.InputTokens == 0 {
		t.Fatalf("count_tokens %v %+v", err, count)
	}
}
