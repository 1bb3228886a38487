// Package frontend is the Switchyard frontend service: the HTTP APIs agent
// harnesses speak (OpenAI Chat Completions, OpenAI Responses, Anthropic
// Messages, models), session identity, preprocessing (chat template,
// tokenization, block hashes with the tenant's cache salt), routing through
// the scheduler and streaming from the chosen worker's engine shim, plus the
// admin gRPC service listing the sessions it has seen.
//
// It is a shell: identity rules live in pkg/agentctx, templates, tool-call
// parsing, the APIs' wire types and request checks in pkg/chat, hashing in
// pkg/kvhash. It
// must never let a panic or a raw Go error reach a client: every failure is
// answered in the API's own error shape.
package frontend
