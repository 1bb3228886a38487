// Package sessionindexer is the session-prefix indexer service: the shell
// around pkg/sessionindex. It learns the worker set from the scheduler's
// WatchWorkers stream, subscribes to every engine shim's KV event stream
// (snapshot first, then events from the snapshot's sequence + 1; a gap or a
// new epoch reloads the snapshot), feeds the events that carry session ids
// into the lineage forest, learns sub-agent parents from the route decisions
// (WatchRouteDecisions, under every policy) and from new programs
// (WatchPrograms asked for admitted and queued only; its snapshot covers a
// reconnect where admission keeps programs), records route-time prefix hits
// from the route decisions, and serves
// GetSessionLineage, GetSessionLineages (many queries at once, each chain
// with its shared count: the hint emitter's read per round), ListSessions
// and GetStats over gRPC and REST. Lineage reads are UNAVAILABLE until the
// worker set has been heard and every worker's snapshot loaded: before
// that, "unknown session" may only mean "not loaded yet".
//
// Ordering against the physical index. Dynamo applies a session mutation
// only after the physical index has applied the same worker's events. Here
// both indexers consume the same per-worker, gap-free, sequenced stream from
// the shim, so each applies a worker's events in the same order, but they
// are separate processes and nothing makes this one wait for the flash
// indexer: for a moment the lineage may name a block the flash indexer does
// not list yet (or no longer lists). That is harmless for what lineage is
// used for (hints are soft; the flash indexer stays the authority on
// residency for routing). Route decisions are the other way round: their
// hit comes from the flash indexer, which may be ahead of this indexer, so a
// hit is applied only once this indexer's own copy of the worker's events
// holds the block (pkg/sessionindex ApplyMatch); until then it waits, per
// worker, and is retried after each of that worker's batches (--match-wait,
// --match-backlog bound the wait). A hit records what the KV events alone
// miss: a turn served entirely from cache stores no block, so without it
// the session would have no lineage on that worker.
//
// The package must never hold logic that belongs in the core, and never
// block the event loop of one worker on another.
package sessionindexer
