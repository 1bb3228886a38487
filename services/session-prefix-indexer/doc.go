// Package sessionindexer is the session-prefix indexer service: the shell
// around pkg/sessionindex. It learns the worker set from the scheduler's
// WatchWorkers stream, subscribes to every engine shim's KV event stream
// (snapshot first, then events from the snapshot's sequence + 1; a gap or a
// new epoch reloads the snapshot), feeds the events that carry session ids
// into the lineage forest, learns sub-agent parents from WatchPrograms, and
// serves GetSessionLineage, ListSessions and GetStats over gRPC and REST.
//
// Ordering against the flash indexer. Dynamo applies a session mutation only
// after the physical index has applied the same worker's events. Here both
// indexers consume the same per-worker, gap-free, sequenced stream from the
// shim, so each applies a worker's events in the same order, but they are
// separate processes and nothing makes this one wait for the other: for a
// moment the lineage may name a block the flash indexer does not list yet
// (or no longer lists). That is harmless for what lineage is used for (hints
// are soft; the flash indexer stays the authority on residency for routing).
// What is left: route-time prefix hits (UpdateFromMatch) are not fed, because
// the scheduler API exposes no stream of route decisions. Little is lost:
// a turn that reuses a prefix stores its new blocks with that prefix's last
// block as parent, which grafts the session onto the prefix in the forest;
// only a turn that stores no block at all (fully cached) goes unrecorded.
//
// The package must never hold logic that belongs in the core, and never
// block the event loop of one worker on another.
package sessionindexer
