// Package engineevents turns the KV event batches that real inference engines
// publish (vLLM's and SGLang's msgpack "EventBatch" over ZMQ) into Switchyard's
// own kv.Events.
//
// It has two halves:
//
//   - DecodeBatch reads one msgpack payload in every encoding seen in the
//     wild: positional or map (tagged) events, 2- or 3-element batches,
//     integer or byte block hashes, optional trailing fields absent or
//     present, SGLang's salted stores (metadata map at position 7) and the
//     newer session_id field. A malformed event is counted and skipped; it
//     never costs the rest of its batch.
//   - Mapper keeps one worker's engine-hash → Switchyard-hash map. Engine
//     block hashes are opaque (vLLM's default is a pickle-based SHA-256 with a
//     random per-process seed), so Switchyard recomputes its own block hashes
//     from each event's token ids with pkg/kvhash and resolves later removals
//     through the map. Entries are reference counted per tier, so the duplicate
//     removals that offload connectors emit never evict a block another
//     announcement still holds.
//
// The package is a pure core: no goroutines, no sockets, no clock. It must
// never panic on outside input (FuzzDecodeBatch guards that) and never trust a
// length prefix further than the bytes actually present.
package engineevents
