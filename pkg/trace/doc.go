// Package trace is Switchyard's request-trace vocabulary and its workload
// model: the dynamo.request.trace.v1 request_end record the frontend writes
// for every request (agent context, token counts, timings, worker, finish
// reason and tool-call names, and the replay block of per-block sequence
// hashes), the sinks that write records (rolling JSONL, gzip JSONL members,
// stderr) behind a bounded, lossy queue, the importers that turn our own
// traces, Dynamo's, Mooncake's (plain and agentic) and the Weka Claude Code
// sessions into one in-memory Workload (sessions → turns with block ids,
// lengths and tool gaps, parent/child sessions), the Walk through a
// session's tree of sub-agents that replay and loadgen both follow, and the
// Perfetto (Chrome Trace Event JSON) export.
//
// It must never hold prompt or response content (records carry counts and
// hashes only), never block the caller of Emit (a full queue drops and
// counts), and never start a goroutine itself: the service that owns a sink
// runs Async.Run in its own goroutine. Importers take an io.Reader and never
// read the wall clock, so fuzzing and replay are deterministic.
package trace
