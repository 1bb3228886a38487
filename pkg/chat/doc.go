// Package chat is the API-independent core of the frontend's request path:
// the normalised Conversation every HTTP API (OpenAI Chat Completions, OpenAI
// Responses, Anthropic Messages) decodes into, the default chat template that
// renders a Conversation into prompt segments, the tool-call parser that turns
// generated text back into content and tool calls, and the wire types of each
// API's requests and responses.
//
// Rendering produces Segments (plain text or a special token) rather than one
// string, so untrusted content can never inject a control token and a turn's
// prompt can be tokenized segment by segment, reusing the previous turn's
// segments (see Preprocessor).
//
// The package is pure: no goroutines, no I/O, no clock (callers pass times in).
package chat
