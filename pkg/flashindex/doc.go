// Package flashindex is the fleet's KV index: for every (worker, dp rank, tier)
// the set of KV blocks it holds, keyed by sequence hash (package kvhash), and
// the query the scheduler asks on every turn: for a prompt's block hashes, how
// deep does each worker's cached prefix go on device, and how far do host,
// disk and shared tiers extend it.
//
// The index is built only from the engines' own KV events (kv.Event), so its
// answers are exact for the events applied.
//
// Structure (index.go: Config and the Index; node.go: the node and side-set
// slabs; table.go: the hash table; rooting.go: which holders are rooted;
// apply.go: Apply and its locking; sweep.go: removing a worker's entries;
// find.go: the lookup):
//
//   - One 32-byte node per block in a chunked slab, found through an
//     open-addressing table of 8-byte slots (node index + 32-bit tag). Nodes
//     carry the block's device holders inline (up to four slots in 8 bytes,
//     else the number of a bitset in a side store, so nodes hold no pointers)
//     and link to parent and children; host/disk/shared holders live in
//     side sets (a slab indexed from a parallel per-node array).
//   - Apply works in batches: every block is tagged and its table slot
//     loaded before any probe, so the cache misses of a batch overlap
//     instead of each waiting alone; inserts and deletions reuse the slot
//     the probe found.
//   - Worker ids are interned to dense slots per (worker, dp rank).
//   - Invariant: a holder is "rooted" at a block when it also holds every
//     ancestor (per cumulative tier level). Non-rooted holders are the
//     exception (out-of-order events, evictions from the middle of a chain,
//     a lower tier evicting a parent first) and are kept in the side sets;
//     children are re-rooted or un-rooted when a hole is filled
//     or made. Rooted sets therefore shrink monotonically along any chain.
//   - FindMatches bisects over prompt positions comparing rooted-set
//     signatures: equal signatures at both ends of a range mean no worker's
//     depth ends inside it. A lookup costs O(B·log(D/B)) probes for D prompt
//     blocks and B distinct depths (a few dozen for real fleets) plus O(W)
//     bit operations, not O(D×W), and it is exact.
//
// Predictions (predict.go) are kept apart: provisional device holdings of a
// routed prompt, with a TTL from the now Predict is given, which the worker's
// real events replace or cut. Only lookups that ask (FindOptions.Predicted)
// count them, so the real answers stay exact.
//
// The shared-pool index (pool.go) follows a Mooncake-like shared pool's own
// event stream (package kvpool): objects per page per tensor-parallel rank,
// a page a hit only when all its objects are present, cleared on a sequence
// gap or a pool restart. Attached to an Index, it extends every worker's
// match: WorkerMatch.Shared then also counts the blocks past the worker's
// own prefix that it can load from the pool (past a pool page its own blocks
// count again), and Matches.PoolPrefix is that extension for a worker the
// index has never heard of. The extension walks the prompt once per query
// over the pool's pages (about 35 µs for 1,563 blocks, see
// BenchmarkFindMatchesWithPool), not by bisection: the pool's events carry
// no chain structure to bisect over.
//
// Freshness (freshness.go) stands beside the index: which workers' KV event
// streams have shown no sign of life for too long (the flash indexer's
// --stale-after), so that their entries, kept, stop counting as hits until
// their snapshot is reloaded. The same rule serves the shared pool's stream,
// read on every lookup through a Watch; FindOptions.PoolStale then leaves
// the pool out.
//
// The package must never start goroutines, open sockets or read the wall
// clock. It is safe for concurrent use: one worker's events must be applied
// in order by the caller (the service runs one goroutine per worker); a
// single RWMutex guards the structure and writes hold it for at most
// Config.WriteChunk blocks (or SweepChunk nodes when a removed worker is
// swept), so readers never wait long. The price is that a reader may see a
// long event half applied, as if it had been sent in pieces (Apply says
// exactly what can be seen); a removed worker vanishes from lookups at once.
package flashindex
