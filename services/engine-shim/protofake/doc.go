// Package protofake is a PROTOCOL FAKE of a vLLM or SGLang server, for tests
// only. It is not an engine and models no performance: it exists because no
// real engine runs on the build machines, and it speaks exactly the wire
// protocols the engine-shim adapter must handle (go-peers.md §6):
//
//   - HTTP: vLLM's POST /v1/completions with a token-id prompt (streamed
//     SSE chunks with token_ids, a final usage chunk with cached prompt
//     tokens, [DONE]) or SGLang's POST /generate with input_ids (streamed
//     output_ids and meta_info); GET /metrics with each engine's metric names
//     (vLLM's cache_config_info and SGLang's page_size included); GET /health.
//   - KV events: a ZMQ PUB socket sending [topic, seq (8-byte BE), msgpack
//     EventBatch], seq from 0, and a ROUTER replay socket answering
//     [identity, "", start seq] with every buffered batch from start, then
//     the end marker (seq 0xFFFFFFFFFFFFFFFF), in either reply layout.
//
// Behind the protocols is a toy prefix cache: prompts are split into blocks,
// named by an engine-side hash unlike Switchyard's (SHA-256 chained, as
// vLLM's sha256 algorithm), reused when cached (reported as cached prompt
// tokens), stored (BlockStored) and evicted LRU (BlockRemoved). Output
// tokens are a deterministic function of the prompt. Test hooks drop live
// batches (to make gaps) or buffered ones (to make holes in a replay),
// restart the publisher and clear the cache.
//
// Messages are encoded with an independent msgpack library
// (vmihailenco/msgpack), never with the decoder under test.
//
// Known leak: zmq4 v0.17.0 never stops a PUB socket's writer goroutine
// (socket.Close does not close it), so each fake leaves one goroutine
// behind; test packages that start fakes ignore it in goleak.
package protofake
