package engineshim

import (
	"context"
	"strings"
	"testing"
	"time"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/services/engine-shim/protofake"
)

// The shim with --engine vllm in front of the protocol fake: Generate over
// gRPC reaches the fake's HTTP server, and the fake's ZMQ events come out of
// SubscribeKvEvents under Switchyard's block hashes.
func TestRealEngineThroughShim(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake, err := protofake.Start(ctx, protofake.Config{Engine: protofake.VLLM, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	cfg := testConfig()
	cfg.Engine = "vllm"
	cfg.Model = "fake-model"
	cfg.BlockSize = 16
	cfg.Adapter.URL = fake.URL()
	cfg.Adapter.EventsEndpoint = fake.EventsEndpoint()
	cfg.Adapter.ReplayEndpoint = fake.ReplayEndpoint()
	h := start(t, cfg)

	// ZMQ drops what the fake publishes before the adapter's SUB has joined,
	// and the adapter fetches missed history only when a later batch
	// arrives; a single request's batch could be lost for good. Clearing the
	// (empty) cache until a batch reaches the shim shows the subscription is
	// up. The deadline only guards against a hang.
	deadline := time.Now().Add(15 * time.Second)
	for h.svc.events.nextSequence() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("no event batch reached the shim")
		}
		if err := fake.Clear(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// From 1: opening the stream does not wait for the shim, so "from now"
	// could begin after the request's batch.
	sctx, scancel := context.WithDeadline(ctx, deadline)
	defer scancel()
	sub, err := h.client.SubscribeKvEvents(sctx, &enginev1.SubscribeKvEventsRequest{FromSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]uint32, 48)
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}
	want := map[uint64]bool{}
	for _, b := range kvhash.New(16, "", "").Blocks(prompt) {
		want[uint64(b)] = true
	}
	res := generate(t, h.client, &enginev1.GenerateRequest{RequestId: "r1", TokenIds: prompt, Sampling: &enginev1.SamplingParams{MaxTokens: 5}})
	if len(res.tokens) != 5 || res.result.GetWorkerId() != "w-test" {
		t.Fatalf("generated %+v", res)
	}
	got := map[uint64]bool{}
	for len(got) < len(want) {
		m, err := sub.Recv()
		if err != nil {
			t.Fatalf("saw %v, want %v: %v", got, want, err)
		}
		for _, ev := range m.GetBatch().GetEvents() {
			for _, b := range ev.GetStored().GetBlockHashes() {
				if want[b] {
					got[b] = true
				}
			}
		}
	}
	snap, err := h.client.GetKvSnapshot(ctx, &enginev1.GetKvSnapshotRequest{})
	if err != nil || len(snap.GetEvents()) < len(want) {
		t.Fatalf("snapshot %v %v", snap, err)
	}
}

// TestSimOnlySettingsNamed: with a real engine, the simulated engine's
// settings an operator changed are named (and warned of at start); the
// defaults name none.
func TestSimOnlySettingsNamed(t *testing.T) {
	cfg := DefaultConfig()
	if got := simOnlySet(cfg); len(got) != 0 {
		t.Fatalf("defaults: %v", got)
	}
	cfg.PoolAddr, cfg.HostBlocks, cfg.Perf = "kv-pool:9600", 1024, "mocker"
	if got, want := strings.Join(simOnlySet(cfg), " "), "--host-blocks --perf --pool-addr"; got != want {
		t.Fatalf("named %q, want %q", got, want)
	}
}
