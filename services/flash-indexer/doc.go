// Package flashindexer is the flash indexer service: it keeps the fleet's KV
// index (package flashindex) in step with every engine shim's KV event stream
// and answers the scheduler's FindMatches on every turn.
//
// It learns the worker set from the scheduler's WatchWorkers stream and
// follows each worker's SubscribeKvEvents. Batches are applied in sequence
// order per worker; duplicates and stale batches are skipped; a sequence gap
// replays from the shim's buffer (re-subscribe from last+1) and, when the shim
// no longer buffers that range or a new epoch shows the shim restarted, the
// worker is cleared and reloaded from GetKvSnapshot. A removed or expired
// worker's blocks are dropped at once.
//
// Memory is bounded by --max-blocks (distinct blocks; about 48 bytes each
// when held by one worker, a bit per extra holder of widely shared blocks;
// the default 16 Mi blocks is under 1 GiB): beyond it new blocks are refused
// and counted, so the index under-reports overlap rather than growing
// without limit.
//
// PredictRoute (predict-on-route, which the scheduler calls after each KV
// route unless its --predict-on-route-ttl is 0) records a routed prompt as provisionally
// held by its worker for a TTL (--predict-ttl, at most --predict-max-ttl);
// the worker's own device events replace or cut it, and only FindMatches
// with include_predicted counts it. --max-predicted-blocks bounds them all.
// A prediction for a worker outside the scheduler's worker set is refused
// NOT_FOUND, and one for a dp rank past the worker's dp_size
// INVALID_ARGUMENT.
//
// FindResident (the scheduler's --held-from-index, at each admission tick)
// answers what an idle program still holds of its latest prompt on its
// worker: the prompt is named by a few of its blocks, and the deepest one
// the index still knows is matched by the chain of blocks up to it.
//
// A worker whose event stream has shown no sign of life for --stale-after
// (default 3 s: no batch, no snapshot, and no answer to the gRPC health probe
// sent every stale-after/3 over the subscription's own connection) is stale:
// the index may have missed its stores and removals, so FindMatches leaves it
// out (as a worker with nothing cached; FindResident says it is stale) until
// its snapshot has been reloaded,
// which happens as soon as the shim answers again (stale.go; the state
// machine is flashindex.Freshness). The shared pool's stream (--pool-addr)
// follows the same rule: while it is stale no worker is credited with the
// pool's pages, until the pool index catches up: the events from the
// position it had, up to the pool's last when it resubscribed (the batch
// that reaches it, not the first of a backlog), or a snapshot (asked for
// when an idle pool answers again).
//
// All index logic lives in pkg/flashindex; this package is the shell.
package flashindexer
