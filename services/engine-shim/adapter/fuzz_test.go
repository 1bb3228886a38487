package adapter

import (
	"bytes"
	"testing"
)

// The engine's /metrics and its generation stream are outside input: a
// broken or hostile engine must cost a scrape or a request, never the shim.

func FuzzParseMetrics(f *testing.F) {
	for _, s := range []string{
		"# HELP x y\n# TYPE x gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n",
		`vllm:cache_config_info{block_size="32",num_gpu_blocks="2000",note="a \"q\" \\ value\n"} 1.0 1700000000000`,
		"sglang:max_total_num_tokens 1e9\nsglang:token_usage{a=\"b\",} NaN\nx +Inf\n",
		`x{a="1" 2`, "x{", "{a=\"1\"} 2", "x{a=\"\\",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		samples, _ := parseMetrics(bytes.NewReader(text))
		for _, s := range samples {
			if s.name == "" {
				t.Fatalf("sample without a name: %+v", s)
			}
		}
		for _, e := range []Engine{VLLM, SGLang} {
			b := &Backend{cfg: Config{Engine: e, BlockSize: 16}}
			b.scraped = summarize(e, samples)
			b.Capacity()
			b.Load()
		}
	})
}

func FuzzEngineStream(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"text\":\"a\",\"token_ids\":[5],\"finish_reason\":null}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\ndata: [DONE]\n\n",
		"data: {\"object\":\"error\",\"message\":\"m\",\"type\":\"t\",\"code\":400}\n\n",
		"data: {\"output_ids\":[5,6],\"meta_info\":{\"completion_tokens\":2,\"finish_reason\":{\"type\":\"abort\",\"status_code\":400}}}\n\n",
		"data: {\"output_ids\":[5],\"meta_info\":{\"completion_tokens\":1,\"finish_reason\":\"length\"}}\n\ndata: {\"output_ids\":[5,6,7],\"meta_info\":{\"completion_tokens\":3}}\n",
		": c\nevent: x\ndata:\ndata: [DONE]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, sglang := range []bool{false, true} {
			var g genState
			_ = readSSE(bytes.NewReader(body), func(data []byte) error {
				var err error
				if sglang {
					_, err = g.sglangChunk(data)
				} else {
					_, err = g.vllmChunk(data)
				}
				return err
			})
			g.result("w")
		}
	})
}
