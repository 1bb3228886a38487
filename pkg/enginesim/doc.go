// Package enginesim is a simulated LLM inference engine core that behaves like
// vLLM v1 where Switchyard's results depend on it: a paged KV cache with
// prefix caching over kvhash sequence hashes, reference counts and an LRU
// eviction queue (leaves before parents), continuous batching with chunked
// prefill and preemption by recompute, optional host and disk tiers, soft KV
// hints, and KV events (Stored, Removed, Cleared) that describe every change
// to the cache on every tier.
//
// The engine is a pure state machine. It owns no goroutines, never sleeps and
// never reads the wall clock: the driver calls Step, which runs one scheduler
// iteration and reports how long that iteration took in simulated time. The
// engine shim sleeps that long (real time); the offline simulator advances a
// virtual clock by it. The same code therefore produces the same tokens, the
// same events and the same timings in both, given the same seed and inputs.
//
// # Events
//
// Stored is emitted once per block that becomes resident on a tier: a block
// whose tokens were just computed (prompt or generated), a block loaded back
// from host, disk or the shared pool for a prefix hit, a block imported or
// prefetched by a hint, and a block demoted to a lower tier. (The shared pool
// publishes its own events, package kvpool: the engine's describe only its
// own tiers.) A prefix-cache hit on a block already on the device emits
// nothing. Removed is emitted when a block leaves a tier (eviction,
// demotion); a demotion emits the lower tier's Stored before the upper
// tier's Removed, since the copy completes before the upper block is reused.
// Cleared on Reset. Stored events carry the session of the request (or hint)
// that caused them. Snapshot describes the whole cache with Stored events
// only, so that a subscriber can rebuild its index from it and then follow
// the stream.
//
// Work per step is proportional to the number of blocks touched and requests
// scheduled, never to the number of cached tokens: a 100k-token prompt whose
// prefix is cached costs one map lookup per 16-token block.
//
// # Default hardware profile
//
// DefaultConfig describes one GPU worker serving a Llama-3.1-8B-class model
// in bf16 on an 80 GB H100-class GPU:
//
//   - KV bytes per token = layers × 2 × kv_heads × head_dim × dtype bytes
//     = 32 × 2 × 8 × 128 × 2 = 131,072 bytes (128 KiB), so a 16-token block is
//     2 MiB. These are Llama-3.1-8B's published architecture numbers
//     (grouped-query attention with 8 KV heads).
//   - NumGPUBlocks = 16,384 blocks of 16 tokens = 262,144 tokens = 32 GiB of KV,
//     the default of Dynamo's mocker (dynamo.md §7) and roughly what is left of
//     80 GB after 16 GB of weights, activations and a conservative
//     gpu_memory_utilization. With agentic prompts of ~100k tokens (the median
//     of the Weka Claude Code traces) one worker holds two to three sessions,
//     so four simulated workers show both prefix reuse and memory pressure.
//   - MaxNumSeqs 256 and MaxNumBatchedTokens 8192 are vLLM's and Dynamo's
//     defaults.
//   - Step times come from the polynomials Dynamo's mocker ships
//     (dynamo.md §7, originally lib/mocker perf_model.rs): prefill
//     ms = 4.209989e-7·N² + 1.518344e-2·N + 16.50142 for N new prompt tokens
//     in the step, decode ms = −25.74·u² + 54.01·u + 5.74 (floor 1 ms) for KV
//     usage u. A step that both prefills and decodes costs the sum. A
//     TableModel (LoadTableModel) replaces them with measured points.
//   - Host tier transfers at 64 GB/s (Dynamo's kv_transfer_bandwidth default,
//     about a PCIe Gen5 x16 link); disk at 8 GB/s (a fast NVMe). Both tiers
//     are off unless HostBlocks / DiskBlocks are set.
//   - A shared pool (Config.SharedPool, a Mooncake-like store shared by the
//     fleet, package kvpool) loads at 25 GB/s: one 200 Gb/s RDMA NIC per GPU
//     at line rate, Mooncake's transfer engine's per-NIC figure; slower than
//     the host link, faster than local NVMe. Blocks evicted from the last
//     local tier are written to it at no charge (write-back runs beside the
//     step); a prompt prefix it holds beyond the engine's own tiers is read
//     at admission, and a page missing any of its objects ends the hit.
//
// # Benchmarks
//
//	go test -run XXX -bench . -count 5 ./pkg/enginesim
//
// BenchmarkAdmitCachedPrompt is issue 3's goal (a) (prompt tokens admitted
// per second for a 100k-token prompt with a 95% prefix hit) and
// BenchmarkDecodeStep goal (b) (steps per second with 256 sequences in
// decode). Each reports wall-clock and CPU-time rates; on a shared machine
// the CPU-time one ("/cpu-s") is the per-core figure.
//
// # What it must never do
//
// No goroutines, sleeps, wall clock, global state or randomness outside the
// seeded per-request generators; no per-token work over cached prefixes; no
// event that does not correspond to a real change of the cache, and no change
// of the cache without its event (an index built from the events alone must
// always equal the cache).
package enginesim
