// Package adapter connects the engine shim to a real inference engine — vLLM
// or SGLang — running beside it, speaking the engine's own protocols:
//
//   - generation over the engine's HTTP server (vLLM /v1/completions with a
//     token-id prompt, SGLang /generate with input_ids), streamed, with
//     cancellation propagated by closing the request;
//   - KV events over ZMQ (pure Go, github.com/go-zeromq/zmq4): one SUB socket
//     per data-parallel rank (ports offset by the rank), per-rank sequence
//     tracking, gaps filled through the engine's ROUTER replay endpoint and,
//     when that cannot be done, a resynchronisation (the rank's blocks are
//     reported removed, or Cleared, and rebuilt from what follows); batches
//     are decoded and mapped to Switchyard's block hashes by
//     pkg/engineevents;
//   - load from the engine's Prometheus /metrics (vLLM and SGLang names) and
//     KV capacity from vLLM's cache_config_info, SGLang's token capacity or
//     configuration;
//   - KV hints mapped onto what the engines accept today, per request, and
//     rejected with a reason where nothing fits; HintSupport announces
//     which (retain and release where the engine has per-request retention),
//     so the hint emitter sends nothing else.
//
// Backend plays the role the simulated driver plays for the simulated
// engine. Recovery is per rank and kept in one place (events.go: live, fill,
// resync), so a "load a snapshot, then apply the buffered live suffix" mode
// can be added there once an engine offers snapshots (vLLM #57789 proposes
// one). All decoding and mapping logic lives in pkg/engineevents; this
// package only moves bytes and keeps connections alive. It never invents
// engine state: what the engine does not report stays unknown (zero).
package adapter
