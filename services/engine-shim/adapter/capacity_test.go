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

// Block counts are in engine blocks: they become tokens with the engine's
// block size, from --engine-block-size or the engine's own report. SGLang's
// page holds 1 token by default and 16 where the docs set --page-size, so
// a guess of either is 16 times off for the other: only an SGLang that
// reports no page size at all (a release before the metric) is read in its
// default page, and vLLM's counts wait for its report.
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
		{"sglang without a page size: its default page", SGLang, 0, 1600, 800,
			"sglang:max_total_num_tokens 64000\n", 100, 50},
		{"sglang without a page size or a token count", SGLang, 0, 160000, 320000,
			"sglang:num_running_reqs 0\n", 10000, 20000},
		{"sglang without a page size, no flags: its own token count", SGLang, 0, 0, 0,
			"sglang:max_total_num_tokens 64000\n", 4000, 0},
		{"vllm without a block size: the counts unused", VLLM, 0, 1000, 0, "vllm:num_requests_running 0\n", 0, 0},
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

// An engine that answers its metrics without its block size leaves the
// block-count flags read in SGLang's default page, or unused (vLLM); the
// operator is told once. One that reports it is not warned of.
func TestNoEngineBlockSizeWarnsOnce(t *testing.T) {
	for _, tc := range []struct {
		engine  Engine
		metrics string
		warning string // "" none
	}{
		{SGLang, `sglang:max_total_num_tokens{model_name="m"} 64000`, "SGLang's default page of 1 token"},
		{SGLang, `sglang:num_running_reqs 0`, "SGLang's default page of 1 token"},
		{VLLM, `vllm:num_requests_running 0`, "are unused"},
		{SGLang, `sglang:page_size 16`, ""},
		{VLLM, `vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1`, ""},
	} {
		engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, tc.metrics)
		}))
		var logs bytes.Buffer
		b, err := New(Config{Engine: tc.engine, WorkerID: "w", URL: engine.URL, BlockSize: 16, GPUBlocks: 1000},
			nil, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		b.scrapeOnce(context.Background())
		b.scrapeOnce(context.Background())
		engine.Close()
		want := 0
		if tc.warning != "" {
			want = 1
		}
		if n := strings.Count(logs.String(), "--engine-block-size"); n != want || !strings.Contains(logs.String(), tc.warning) {
			t.Errorf("%s %q: %d warnings naming --engine-block-size, want %d saying %q:\n%s", tc.engine, tc.metrics, n, want, tc.warning, logs.String())
		}
	}
}
