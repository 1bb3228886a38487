// Package agentctx turns the identity headers that agent harnesses already send
// (Claude Code, Codex, the DeepSeek harness, OpenCode, or Switchyard's own
// canonical x-dynamo-* headers) into one AgentContext: which session a request
// belongs to, its parent session, whether it is the session's last request,
// whether it is a compaction, and what triggered it.
//
// The precedence is Dynamo's (see shared/reference/dynamo.md §1.2): canonical
// headers win; otherwise the first harness whose root header is present wins
// and harnesses are never mixed. Ids are untrusted input: they are validated
// (visible ASCII, at most MaxIDBytes) and a bad one is a typed *Error that the
// HTTP layer reports as a 400 in the API's own error shape.
//
// This package is pure: no goroutines, no I/O, no clock. It never scopes ids by
// tenant (the caller does, see Scope) and never trusts an id as authorization.
package agentctx
