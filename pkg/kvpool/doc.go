// Package kvpool is a simulated shared KV store with the semantics of
// Mooncake Store as SGLang's HiCache uses it for its L3 tier (dynamo.md §5):
// every page of KV (one engine block, named by its sequence hash) is stored
// as separate objects, one per tensor-parallel rank for keys and one for
// values (`<hash>_<rank>_k`, `<hash>_<rank>_v`), and the store knows only
// objects. It has a capacity in objects, evicts the least recently used
// object when full, and publishes an event stream — `stored` and `removed`,
// one per object, each with the next sequence number — that indexers follow.
//
// Because objects come and go one at a time, a page can be partly present
// (an eviction that took some of its objects, a put that wrote only some
// ranks). A partial page is useless to an engine: a reader counts a page as a
// hit only when all its objects are present, and so must any index.
//
// Simulated engines (package enginesim) write the blocks their last local
// tier evicts into a Store and load prompt prefixes back from it; in the
// offline simulator every engine shares one Store, whose events feed the
// flash index's shared-pool index (package flashindex).
//
// The package is a pure core: no goroutines, sockets, wall clock or
// randomness. A Store is not safe for concurrent use; its driver serializes
// calls.
package kvpool
