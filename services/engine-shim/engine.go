package engineshim

import (
	"context"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/engine-shim/adapter"
)

// Engine is what a shim fronts: the simulated engine, stepped in real time
// by the driver (simengine.go), or a real vLLM or SGLang server beside the
// shim (realEngine, over adapter.Backend). The service's handlers only
// delegate to it. Both publish their KV events to the shim's eventLog,
// which numbers them for subscribers.
type Engine interface {
	// Info names the engine and its shape.
	Info() engineInfo
	// Run runs the engine side until ctx is done; the simulated engine
	// first lets the requests in flight finish (bounded by DrainTimeout).
	Run(ctx context.Context) error
	// Generate serves one Generate call on stream: token deltas, then the
	// result.
	Generate(ctx context.Context, req *enginev1.GenerateRequest, stream adapter.GenerateStream) error
	// Snapshot is every block the engine holds, as Stored events, and the
	// sequence of the last batch published that they are consistent with.
	Snapshot() ([]kv.Event, uint64)
	// ApplyHints answers each action of an envelope, in order.
	ApplyHints(actions []*kvv1.KvHintAction) []*kvv1.KvHintOutcome
	// HintSupport is the hints the engine acts on, with their limits: what
	// the shim announces when it registers.
	HintSupport() hints.Support
	Load() *workerv1.WorkerLoad
	Capacity() *workerv1.WorkerCapacity
}

// engineInfo is what a worker's registration says about its engine.
type engineInfo struct {
	Name      string // "sim", "vllm" or "sglang"
	BlockSize int    // Switchyard tokens per block
	DPSize    int    // data-parallel ranks publishing events
}

var (
	_ Engine = (*driver)(nil)
	_ Engine = (*realEngine)(nil)
)
