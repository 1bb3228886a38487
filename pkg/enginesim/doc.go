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
// # Timing
//
// A PerfModel turns each step's Batch (per prefill chunk its new tokens and
// the prefix they attend to; the number of decodes and the context they
// read) into time. Roofline is the physical one: linear layers cost the
// larger of their FLOPs and their weight reads, causal attention grows with
// prefix × new tokens in prefill and with the context in decode, tensor
// parallelism adds all-reduces, and efficiencies fitted to published vLLM
// measurements bring the datasheet down to what an engine reaches. Presets
// name a model on a GPU (`--perf llama-3.1-8b@h100-sxm`, the default;
// `qwen3-coder-30b-a3b@h200`; `minimax-m2-tp4@h100-sxm`) and size the
// worker's KV cache as vLLM does: device memory × gpu_memory_utilization
// (0.9), less the weights and an activation reserve, over the KV bytes per
// token. TableModel interpolates measured grids; MockerModel keeps Dynamo's
// polynomials (`--perf mocker`) for comparison, though they are not
// physical. docs/simulator.md derives the model and lists every preset's
// published checks (PublishedChecks, RunServeBench).
//
// Loads from host, disk or the shared pool run on each tier's link beside
// the steps: the request waits for its KV, the others keep computing.
//
// # Default hardware profile
//
// DefaultConfig is one worker of the default preset, Llama-3.1-8B in bf16
// on one 80 GB H100:
//
//   - KV bytes per token = layers × 2 × kv_heads × head_dim × dtype bytes
//     = 32 × 2 × 8 × 128 × 2 = 131,072 bytes (128 KiB), so a 16-token block
//     is 2 MiB.
//   - KV capacity: 81,559 MiB × 0.9 − 16.06 GB of weights − 3 GiB reserve
//     ≈ 440k tokens, in 16-token blocks.
//   - MaxNumSeqs 256 and MaxNumBatchedTokens 8192 are vLLM's and Dynamo's
//     defaults.
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
// # Layout
//
// engine.go is the Engine and its construction; intake.go, Add and Abort;
// schedule.go, Step: its passes, admission with prefix hits over every
// tier, preemption; pending.go, the cache changes a pass defers and the
// rule that keeps them exact; blocks.go, allocation, eviction down the
// tiers and the naming of full blocks; loads.go, copies from lower tiers on
// their links; output.go, sampling and StepResult; stats.go, Stats and
// Load; snapshot.go, Snapshot and Reset. Below them: pool.go (device
// blocks), tier.go (host and disk), hashindex.go, events.go; beside them:
// hints.go and the perf models (perf.go, roofline.go, table.go, mocker.go).
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
