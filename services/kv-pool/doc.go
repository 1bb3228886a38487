// Package kvpoolservice is the kv-pool service: the simulated shared KV pool
// (package kvpool, Mooncake Store-like) behind a gRPC API. Simulated engines
// (engine shims started with --pool-addr) write the blocks their last local
// tier evicts and read prompt prefixes from it; the flash indexer follows its
// event stream (stored/removed per object, consecutive sequence numbers, an
// epoch per process start) into its shared-pool index.
//
// The service is a thin shell: one mutex around the store, a replay buffer
// of recent events for subscribers that reconnect, and a snapshot for those
// that fall further behind.
package kvpoolservice
