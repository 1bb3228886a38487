// Package trace is Switchyard's request-trace vocabulary and its workload
// model: the dynamo.request.trace.v1 request_end record the frontend writes
// for every request (agent context, token counts, timings, worker, finish
// reason and tool-call names, and the replay block of per-block sequence
// hashes), the sinks that encode records (rolling JSONL, gzip JSONL members,
// stderr), the importers that turn our own traces, Dynamo's, Mooncake's
// (plain and agentic) and the Weka Claude Code sessions into one in-memory
// Workload (sessions → turns with block ids, lengths and tool gaps,
// parent/child sessions), the Walk through a session's tree of sub-agents
// that replay and loadgen both follow, and the Perfetto (Chrome Trace Event
// JSON) export.
//
// It must never hold prompt or response content (records carry counts and
// hashes only), and it opens no file, starts no goroutine and reads no
// clock (pkg/doc.go): importers take an io.Reader, so fuzzing and replay
// are deterministic; the file sink decides what goes in which file and
// when to roll, but opens files through the Opener it is given and stamps
// envelopes with the now of each Write. Listing and opening trace files,
// and the bounded, lossy queue whose Run goroutine writes the records so
// that a request never waits for a disk, are the shells'
// (services/servicekit/tracefile).
package trace
