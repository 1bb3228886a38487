package engineshim

import (
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/services/servicekit"
)

// The registration announces what the engine acts on of the KV hints, so
// the emitter sends each worker only that: the simulated engine what its
// tiers allow, SGLang and vLLM with retention directives retain and
// release, a vLLM release build nothing (an empty list, not an absent one).
func TestRegistrationAnnouncesHintSupport(t *testing.T) {
	caps := func(cs ...*kvv1.HintCapability) *kvv1.HintSupport {
		return &kvv1.HintSupport{Capabilities: cs}
	}
	at := func(t string) *kvv1.HintCapability { return &kvv1.HintCapability{ActionType: t} }
	for _, tc := range []struct {
		name   string
		cfg    func(*Config)
		engine string
		want   *kvv1.HintSupport
	}{
		{"simulated, device only", func(*Config) {}, "sim",
			caps(at("kv.share@1"), at("kv.release_session@1"))},
		{"simulated with a host tier", func(c *Config) { c.HostBlocks = 64 }, "sim",
			caps(at("kv.share@1"), at("kv.prefetch@1"), at("kv.demote@1"), at("kv.release_session@1"))},
		{"SGLang", func(c *Config) { c.Engine = "sglang" }, "sglang",
			caps(&kvv1.HintCapability{ActionType: "kv.retain@1", MaxPriority: 99, NextRequests: true},
				&kvv1.HintCapability{ActionType: "kv.release_session@1", NextRequests: true})},
		{"vLLM with retention directives", func(c *Config) { c.Engine, c.Adapter.VLLMRetention = "vllm", true }, "vllm",
			caps(&kvv1.HintCapability{ActionType: "kv.retain@1", MaxPriority: 100, NextRequests: true},
				&kvv1.HintCapability{ActionType: "kv.release_session@1", NextRequests: true})},
		{"vLLM release build", func(c *Config) { c.Engine = "vllm" }, "vllm", caps()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := servicekit.New(servicekit.Options{Name: "engine-shim", Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			cfg := DefaultConfig()
			cfg.WorkerID, cfg.NumGPUBlocks = "w-hints", 256
			tc.cfg(&cfg)
			svc, err := New(cfg, srv)
			if err != nil {
				t.Fatal(err)
			}
			w := svc.workerProto()
			if w.GetEngine() != tc.engine || w.GetBlockSize() != uint32(cfg.BlockSize) || w.GetDpSize() != 1 {
				t.Errorf("worker %v", w)
			}
			if w.GetHintSupport() == nil {
				t.Fatal("no hint support announced")
			}
			if diff := cmp.Diff(tc.want, w.GetHintSupport(), protocmp.Transform()); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}
