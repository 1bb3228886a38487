package engineshim

import (
	"context"
	"log/slog"
	"strings"
	"time"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/engine-shim/adapter"
	"switchyard.dev/services/servicekit"
)

// realEngine is a vLLM or SGLang server beside the shim (--engine
// vllm|sglang), seen through adapter.Backend. The backend's events go to the
// shim's event log, so subscription, replay and snapshots work exactly as
// for the simulated engine.
type realEngine struct {
	b   *adapter.Backend
	log *eventLog
}

// newRealEngine builds the adapter and registers its metrics on srv.
func newRealEngine(cfg Config, srv *servicekit.Server, log *eventLog, logger *slog.Logger) (*realEngine, error) {
	acfg := cfg.Adapter
	acfg.Engine = adapter.Engine(cfg.Engine)
	acfg.WorkerID, acfg.Model, acfg.BlockSize = cfg.WorkerID, cfg.Model, cfg.BlockSize
	// The backend calls the sink under the lock Snapshot holds, so a
	// snapshot is consistent with the log's last sequence read there.
	b, err := adapter.New(acfg, log.publish, logger)
	if err != nil {
		return nil, err
	}
	if err := srv.Registry().Register(b.Collector(srv.MetricName)); err != nil {
		return nil, err
	}
	if ignored := simOnlySet(cfg); len(ignored) > 0 {
		logger.Warn("these settings configure the simulated engine only; the "+cfg.Engine+" engine ignores them (its own flags set what they would)",
			"flags", strings.Join(ignored, ", "))
	}
	return &realEngine{b: b, log: log}, nil
}

// simOnlySet names the simulated engine's settings that differ from their
// defaults: with a real engine they do nothing, and an operator who set one
// (a shared pool, a host tier, a step-time model) should hear that rather
// than believe it in force.
func simOnlySet(cfg Config) []string {
	d := DefaultConfig()
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"--num-gpu-blocks", cfg.NumGPUBlocks != d.NumGPUBlocks},
		{"--host-blocks", cfg.HostBlocks != d.HostBlocks},
		{"--disk-blocks", cfg.DiskBlocks != d.DiskBlocks},
		{"--max-num-seqs", cfg.MaxNumSeqs != d.MaxNumSeqs},
		{"--max-num-batched-tokens", cfg.MaxNumBatchedTokens != d.MaxNumBatchedTokens},
		{"--speedup", cfg.SpeedUp != d.SpeedUp},
		{"--seed", cfg.Seed != d.Seed},
		{"--perf", cfg.Perf != d.Perf},
		{"--pool-addr", cfg.PoolAddr != d.PoolAddr},
		{"--pool-bandwidth", cfg.PoolBandwidth != d.PoolBandwidth},
	} {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

func (r *realEngine) Info() engineInfo {
	c := r.b.Config()
	return engineInfo{Name: string(c.Engine), BlockSize: c.BlockSize, DPSize: max(1, c.DPSize)}
}

func (r *realEngine) Run(ctx context.Context) error { return r.b.Run(ctx) }

func (r *realEngine) Generate(ctx context.Context, req *enginev1.GenerateRequest, stream adapter.GenerateStream) error {
	return r.b.ServeGenerate(ctx, req, stream)
}

func (r *realEngine) Snapshot() ([]kv.Event, uint64) {
	var evs []kv.Event
	var seq uint64
	// Under the adapter's lock no batch is published, so the log's last
	// sequence is the one the snapshot is consistent with.
	r.b.Snapshot(func(e []kv.Event) {
		evs, seq = e, r.log.last()
	})
	return evs, seq
}

func (r *realEngine) ApplyHints(actions []*kvv1.KvHintAction) []*kvv1.KvHintOutcome {
	return r.b.ApplyHints(actions, time.Now())
}

func (r *realEngine) HintSupport() hints.Support         { return r.b.HintSupport() }
func (r *realEngine) Load() *workerv1.WorkerLoad         { return r.b.Load() }
func (r *realEngine) Capacity() *workerv1.WorkerCapacity { return r.b.Capacity() }
