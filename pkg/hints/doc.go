// Package hints holds the KV hint policies of the kvhint emitter: rules that
// turn program lifecycle (the scheduler's WatchPrograms stream), session
// lineage (the session-prefix indexer) and worker load into soft KV hints —
// Demote a session's blocks to host during a long tool call or while
// admission control has it paused, Prefetch them back when it resumes or its
// next turn starts, Share a parent's prefix with a sub-agent placed on
// another worker, and release a finished session's blocks first.
//
// Hints state intent; engines decide. A lost or refused hint never changes
// correctness, so the policies favour doing nothing over guessing: every
// action names the blocks the lineage says the session built, and each
// worker has a rate limit (hints per second) and a budget (blocks moved per
// second), both token buckets on the caller's clock.
//
// The package is a pure core: no goroutines, no sockets, no wall clock (now
// is passed in) and no protobuf. The lineage and load it needs come through
// the View interface, which the service implements over gRPC and tests with
// a map. An Engine is not safe for concurrent use.
package hints
