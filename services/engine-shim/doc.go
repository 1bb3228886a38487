// Package engineshim is the engine shim: the sidecar beside one GPU worker
// that adapts its engine to the Switchyard mesh. The engine is one Engine
// (engine.go): Switchyard's simulated engine (pkg/enginesim), which the
// driver steps in real time, sleeping each step's simulated duration so
// tokens stream at the pace the modelled hardware would produce them; or a
// real vLLM or SGLang server beside the shim (--engine, package adapter).
// The service's handlers only delegate to it. Around it the shim:
//
//   - serves Generate (token deltas, then usage with cached prompt tokens and
//     the finish reason; a cancelled call aborts the request and frees its
//     blocks);
//   - publishes the engine's KV events as numbered batches (worker id, epoch,
//     per-worker sequence) with a replay buffer and a snapshot for
//     subscribers that fall behind;
//   - executes KV hints and reports load;
//   - registers with the scheduler (announcing the KV hints its engine acts
//     on, Engine.HintSupport) and heartbeats its lease;
//   - exports vLLM's metric names so existing dashboards work;
//   - on shutdown deregisters, refuses new requests and lets the ones in
//     flight finish (bounded by --drain-timeout).
//
// All engine behaviour lives in pkg/enginesim; this package must stay a thin
// shell: no scheduling, caching or timing decisions of its own.
package engineshim
