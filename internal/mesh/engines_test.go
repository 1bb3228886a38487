package mesh_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	"switchyard.dev/internal/mesh"
	engineshim "switchyard.dev/services/engine-shim"
	"switchyard.dev/services/engine-shim/protofake"
	"switchyard.dev/services/servicekit/servicetest"
)

// TestRealEngineProtocolsEndToEnd puts a PROTOCOL FAKE of vLLM (and of
// SGLang) behind each shim instead of the simulated engine: the frontend
// routes through the scheduler to a shim speaking the engine's HTTP API, and
// the engine's ZMQ KV events reach the flash indexer re-hashed into
// Switchyard's block hashes, so the second turn of a session is routed to the
// worker whose engine cached its prefix.
func TestRealEngineProtocolsEndToEnd(t *testing.T) {
	for _, engine := range []string{protofake.VLLM, protofake.SGLang} {
		t.Run(engine, func(t *testing.T) {
			// Cleanups, not defers: the fakes outlive the mesh, which stops in
			// startMesh's cleanup.
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			fakes := make([]*protofake.Engine, 2)
			for i := range fakes {
				f, err := protofake.Start(ctx, protofake.Config{Engine: engine, BlockSize: 16, NumGPUBlocks: 4096})
				if err != nil {
					t.Fatalf("start protocol fake: %v", err)
				}
				t.Cleanup(f.Close)
				fakes[i] = f
			}
			m := startMesh(t, func(cfg *mesh.Config) {
				cfg.Workers = len(fakes)
				cfg.Shim = func(i int, c *engineshim.Config) {
					c.Engine = engine
					c.Model = "fake-model"
					c.Adapter.URL = fakes[i].URL()
					c.Adapter.EventsEndpoint = fakes[i].EventsEndpoint()
					c.Adapter.ReplayEndpoint = fakes[i].ReplayEndpoint()
				}
			})
			base := "http://" + m.Endpoint("frontend").HTTP

			history := []message{
				{Role: "system", Content: "You are a coding agent working in a large repository. Be brief and precise, and always read before you write."},
				{Role: "user", Content: "Which file defines the HTTP server, and what does its main function do?"},
			}
			resp1, body1 := postChat(t, base, "fake-"+engine, map[string]any{"model": "switchyard-sim", "max_tokens": 16, "messages": history})
			if resp1.StatusCode != http.StatusOK {
				t.Fatalf("turn 1: status %d: %s", resp1.StatusCode, body1)
			}
			worker := resp1.Header.Get("X-Switchyard-Worker")
			var turn1 chatResponse
			if err := json.Unmarshal(body1, &turn1); err != nil || len(turn1.Choices) != 1 || turn1.Usage.CompletionTokens == 0 {
				t.Fatalf("turn 1: bad answer %s (%v)", body1, err)
			}

			// The engine's events reach the indexer: wait until it holds the
			// turn's blocks for that worker (event delivery is asynchronous).
			flash := flashindexv1.NewFlashIndexerServiceClient(dial(t, m.Endpoint("flash-indexer").GRPC))
			var err error
			if !servicetest.Poll(servicetest.Patience, func() bool {
				var dump *flashindexv1.DumpWorkerResponse
				dump, err = flash.DumpWorker(ctx, &flashindexv1.DumpWorkerRequest{WorkerId: worker})
				return err == nil && len(dump.GetEvents()) > 0
			}) {
				t.Fatalf("flash indexer holds nothing of %s after turn 1 (%v)", worker, err)
			}

			history = append(history,
				message{Role: "assistant", Content: turn1.Choices[0].Message.Content},
				message{Role: "user", Content: "Open it and list the handlers it registers."})
			resp2, body2 := postChat(t, base, "fake-"+engine, map[string]any{"model": "switchyard-sim", "max_tokens": 16, "messages": history})
			if resp2.StatusCode != http.StatusOK {
				t.Fatalf("turn 2: status %d: %s", resp2.StatusCode, body2)
			}
			if got := resp2.Header.Get("X-Switchyard-Worker"); got != worker {
				t.Fatalf("turn 2 went to %q, turn 1 to %q", got, worker)
			}
			var turn2 chatResponse
			if err := json.Unmarshal(body2, &turn2); err != nil || turn2.Usage.PromptTokensDetails.CachedTokens <= 0 {
				t.Fatalf("turn 2: the engine reported no cached prompt tokens: %s (%v)", body2, err)
			}
		})
	}
}
