// Package chat is the API-independent core of the frontend's request path:
// the normalised Conversation every HTTP API (OpenAI Chat Completions, OpenAI
// Responses, Anthropic Messages) decodes into, the default chat template that
// renders a Conversation into prompt segments, the tool-call parser that turns
// generated text back into content and tool calls, the splitter that takes a
// leading <think>…</think> block out of the answer as reasoning
// (ThinkSplitter), and the wire types of each API's requests and responses.
//
// Each API's decoder checks a body's fields one by one; its request's
// Conversation is what a template renders, and CheckedConversation, what a
// server answers, also rejects what the upstream API rejects although a
// template could render it (among them a tool_choice naming no declared
// tool, and tool calls and results that do not pair).
//
// Rendering produces Segments (plain text or a special token) rather than one
// string, so untrusted content can never inject a control token and a turn's
// prompt can be tokenized segment by segment, reusing the previous turn's
// segments (see Preprocessor).
//
// Two templates exist. ChatML is the built-in default (what `switchyard up`
// and a frontend without --chat-template use): ChatML turns and Hermes-style
// tools, spelled with the special tokens of the embedded Qwen3 tokenizer
// (pkg/tokenizer.Default), whose <|im_end|> ends generation and whose
// <tool_call> blocks HermesParser reads back, so tokenizer, template, stop
// tokens and tool-call parser agree. It is the default because it needs no
// model files, is prefix-stable by construction (a session's next prompt
// always extends the previous one, which is what the KV-aware routing
// exploits) and is rendered by plain string building, far cheaper than a
// Jinja render of a 100k-token conversation. Engines behind the mesh receive
// token ids, not text, so they never render a template of their own.
//
// JinjaTemplate renders a model's own chat_template (--chat-template: a file,
// or "qwen3" for the real Qwen3 template embedded in pkg/tokenizer) byte for
// byte as vLLM would (Python jinja2 with transformers' settings, vLLM's
// message and tool normalisation); use it to serve a real model exactly as
// it was trained. testdata/gen_qwen3_golden.py and TestJinjaQwen3Golden
// hold it to that.
//
// The package is pure: no goroutines, no I/O, no clock (callers pass times in).
package chat
