package adapter

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Block counts are in engine blocks: they become tokens only with the
// engine's block size, from --engine-block-size or the engine's own report,
// never a guess. SGLang's page holds 1 token by default and 16 where the
// docs set --page-size, so a guess of either is 16 times off for the other.
func TestCapacityEngineBlockSize(t *testing.T) {
	for _, tc := range []struct {
		name              string
		engine            Engine
		engineBlockSize   int
		gpuFlag, hostFlag int
		metrics           string
		gpu, host         uint32 // Switchyard blocks of 16 tokens
	}{
		{"sglang page size from its gauge", SGLang, 0, 1000, 0,
			"sglang:max_total_num_tokens{model_name=\"m\"} 64000\nsglang:page_size{model_name=\"m\"} 16\n", 1000, 0},
		{"sglang page size from the older cache_config_info", SGLang, 0, 1000, 0,
			"sglang:max_total_num_tokens 64000\nsglang:cache_config_info{page_size=\"16\",num_pages=\"4000\"} 1\n", 1000, 0},
		{"sglang data-parallel ranks report one page size", SGLang, 0, 1000, 0,
			"sglang:page_size{dp_rank=\"0\"} 16\nsglang:page_size{dp_rank=\"1\"} 16\n", 1000, 0},
		{"sglang default page of one token", SGLang, 0, 1600, 0, "sglang:page_size 1\n", 100, 0},
		{"sglang host pages", SGLang, 0, 0, 500,
			"sglang:max_total_num_tokens 64000\nsglang:page_size 16\n", 4000, 500},
		{"the flag over the engine's report", SGLang, 64, 1000, 0, "sglang:page_size 16\n", 4000, 0},
		{"sglang without a page size: its own token count", SGLang, 0, 1000, 500,
			"sglang:max_total_num_tokens 64000\n", 4000, 0},
		{"vllm before its first scrape", VLLM, 0, 1000, 0, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(Config{Engine: tc.engine, WorkerID: "w", URL: "http://x", BlockSize: 16,
				EngineBlockSize: tc.engineBlockSize, GPUBlocks: tc.gpuFlag, HostBlocks: tc.hostFlag}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			samples, err := parseMetrics(strings.NewReader(tc.metrics))
			if err != nil {
				t.Fatal(err)
			}
			b.scraped = summarize(tc.engine, samples)
			c := b.Capacity()
			if c.GetGpuBlocks() != tc.gpu || c.GetHostBlocks() != tc.host {
				t.Fatalf("capacity %v, want %d GPU and %d host blocks", c, tc.gpu, tc.host)
			}
		})
	}
}

// An engine that has loaded (it reports its token capacity) but no block
// size leaves the block-count flags unused; the operator is told once.
func TestNoEngineBlockSizeWarnsOnce(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `sglang:max_total_num_tokens{model_name="m"} 64000`)
	}))
	defer engine.Close()
	var logs bytes.Buffer
	b, err := New(Config{Engine: SGLang, WorkerID: "w", URL: engine.URL, BlockSize: 16, GPUBlocks: 1000},
		nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b.scrapeOnce(context.Background())
	b.scrapeOnce(context.Background())
	if n := strings.Count(logs.String(), "--engine-block-size"); n != 1 {
		t.Fatalf("%d warnings naming --engine-block-size, want 1:\n%s", n, logs.String())
	}
}
