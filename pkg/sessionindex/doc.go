// Package sessionindex is the core of the session-prefix indexer: one shared
// forest of logical KV blocks keyed by sequence hash (kv.BlockHash), and for
// every session and worker the frontier nodes — the deepest block of each
// chain the session built there. A session's lineage on a worker is the set of
// root-first chains that end at its frontiers; sub-agents branch from their
// parent's lineage simply because their blocks extend the parent's hashes.
//
// The forest records what sessions built, not what is resident: the flash
// indexer stays the authority on residency. Lineage therefore outlives
// physical eviction from one tier; a frontier recedes only when its block has
// left every tier of the worker (see Residency), and is dropped when the
// worker is cleared or removed.
//
// Updates come from KV events that carry a session id (Stored: parent hash +
// block hashes), from route decisions (a prefix hit on the chosen worker:
// ApplyMatch, which records it only once the worker's events made the block
// resident and otherwise reports false, for the caller to retry after the
// worker's next events; UpdateFromMatch records a hit on a known block
// without asking about residency), from removals and from worker clears.
// Every Stored update is validated as a whole before anything is applied: an
// unknown parent that does not reconnect known lineage, a block whose known
// parent differs, or a cycle yields a typed *UpdateError and leaves the index
// untouched.
//
// Nodes live in a dense slice with a free list; a node is freed as soon as no
// frontier and no child refers to it, so the forest is exactly the union of
// all lineages. Sessions are capped (LRU, default 16,384).
//
// The package is a pure core: no goroutines, no sockets, no wall clock (time
// is passed in) and no locking — an Index is not safe for concurrent use; the
// service serialises calls. It must never panic on outside input.
package sessionindex
