// Package kvhash computes the block hashes that name KV cache contents across
// Switchyard: the frontend hashes prompts with it, simulated engines name their
// cached blocks with it, and the indexers key their maps by it. All of them must
// agree bit for bit, so this is the one implementation.
//
// The scheme follows Dynamo's KV router: a block's local hash is xxh3-64 over
// its tokens as little-endian u32s, seeded by the LoRA adapter and the cache
// salt; the sequence hash chains local hashes so that equal sequence hashes mean
// equal prefixes. Only full blocks are hashed.
package kvhash
