package protofake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// decodeBody reads a JSON body into a generic map (kept for assertions).
func decodeBody(r *http.Request) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

func uint32s(v any) ([]uint32, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]uint32, len(list))
	for i, x := range list {
		n, ok := x.(json.Number)
		if !ok {
			return nil, false
		}
		k, err := n.Int64()
		if err != nil || k < 0 || k > 1<<32-1 {
			return nil, false
		}
		out[i] = uint32(k)
	}
	return out, true
}

// outputCap is a request's output cap as the engines read their field key:
// its value; def, the engine's default, when the field is absent (vLLM's
// completions API: 16); an answer ended naturally (capNone) when it is
// null, which both engines read as what the context window leaves.
func outputCap(m map[string]any, key string, def int) int {
	if v, present := m[key]; present && v == nil {
		return capNone
	}
	return intOf(m[key], def)
}

// capNone asks run for an answer that ends of itself, after naturalTokens
// ("stop"), as an engine's answer ends before the room its context leaves.
const (
	capNone       = -1
	naturalTokens = 24
)

func intOf(v any, def int) int {
	if n, ok := v.(json.Number); ok {
		if k, err := n.Int64(); err == nil {
			return int(k)
		}
	}
	return def
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// nextToken is the fake's "model": a deterministic function of the
// previous token.
func nextToken(prev uint32, i int) uint32 {
	return (prev*31 + uint32(i)*7 + 11) % 32000
}

// run admits a request, then streams its tokens through send; it returns
// the finish reason and counts. The cache is updated again at the end with
// the output's full blocks.
func (e *Engine) run(r *http.Request, req Request, prompt []uint32, maxTokens int, stop []uint32, lora, salt string,
	send func(tok uint32, i, cached int, finish string) error) (cached, completion int, finish string, err error) {
	session := r.Header.Get("X-Session-ID")
	cached, err = e.admit(prompt, lora, salt, session)
	if err != nil {
		return 0, 0, "", err
	}
	e.mu.Lock()
	e.running++
	idx := len(e.requests)
	e.requests = append(e.requests, req)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running--
		if finish == "" {
			e.requests[idx].Aborted = true
			e.aborts++
		}
		e.mu.Unlock()
	}()
	natural := maxTokens == capNone
	if natural {
		maxTokens = naturalTokens
	} else if maxTokens <= 0 {
		maxTokens = 16
	}
	out := slices.Clone(prompt)
	prev := prompt[len(prompt)-1]
	for i := range maxTokens {
		if e.cfg.TokenDelay > 0 {
			t := time.NewTimer(e.cfg.TokenDelay)
			select {
			case <-r.Context().Done():
				t.Stop()
				return cached, i, "", r.Context().Err()
			case <-t.C:
			}
		}
		if r.Context().Err() != nil {
			return cached, i, "", r.Context().Err()
		}
		tok := nextToken(prev, i)
		prev = tok
		out = append(out, tok)
		f := ""
		switch {
		case slices.Contains(stop, tok), natural && i == maxTokens-1:
			f = "stop"
		case i == maxTokens-1:
			f = "length"
		}
		if err := send(tok, i, cached, f); err != nil {
			return cached, i, "", err
		}
		if f != "" {
			if _, err := e.admit(out, lora, salt, session); err != nil {
				return cached, i + 1, f, err
			}
			return cached, i + 1, f, nil
		}
	}
	return cached, maxTokens, "length", nil
}

func sse(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return err
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// completions imitates vLLM's POST /v1/completions with a token-id prompt.
func (e *Engine) completions(w http.ResponseWriter, r *http.Request) {
	body, err := decodeBody(r)
	if err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	prompt, ok := uint32s(body["prompt"])
	if !ok || len(prompt) == 0 {
		http.Error(w, `{"error":{"message":"prompt must be a list of token ids"}}`, http.StatusBadRequest)
		return
	}
	if m := str(body["model"]); m != "" && m != e.cfg.Model && !isLora(m) {
		http.Error(w, `{"error":{"message":"model not found"}}`, http.StatusNotFound)
		return
	}
	if body["stream"] != true {
		http.Error(w, `{"error":{"message":"this fake only streams"}}`, http.StatusBadRequest)
		return
	}
	withIDs := body["return_token_ids"] == true
	stop, _ := uint32s(body["stop_token_ids"])
	lora := ""
	if m := str(body["model"]); isLora(m) {
		lora = m
	}
	req := Request{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	id := "cmpl-" + r.Header.Get("X-Request-Id")
	cached, completion, finish, err := e.run(r, req, prompt, outputCap(body, "max_tokens", 16), stop, lora, str(body["cache_salt"]),
		func(tok uint32, _, _ int, finish string) error {
			choice := map[string]any{"index": 0, "text": fmt.Sprintf("<%d>", tok), "finish_reason": nil}
			if withIDs {
				choice["token_ids"] = []uint32{tok}
			}
			if finish != "" {
				choice["finish_reason"] = finish
			}
			return sse(w, map[string]any{"id": id, "object": "text_completion", "choices": []any{choice}, "usage": nil})
		})
	if err != nil {
		return
	}
	_ = finish
	usage := map[string]any{
		"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached},
	}
	_ = sse(w, map[string]any{"id": id, "object": "text_completion", "choices": []any{}, "usage": usage})
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
}

func isLora(model string) bool { return len(model) > 5 && model[:5] == "lora-" }

// sglangFields are the top-level fields the fake's /generate accepts; like
// SGLang's request dataclass it rejects any other.
var sglangFields = map[string]bool{
	"input_ids": true, "text": true, "sampling_params": true, "stream": true, "rid": true,
	"lora_path": true, "cache_salt": true, "priority": true, "retention_seconds": true,
	"return_logprob": true, "session_params": true,
}

// generate imitates SGLang's POST /generate with input_ids.
func (e *Engine) generate(w http.ResponseWriter, r *http.Request) {
	body, err := decodeBody(r)
	if err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	for k := range body {
		if !sglangFields[k] {
			http.Error(w, fmt.Sprintf(`{"error":{"message":"unexpected keyword argument '%s'"}}`, k), http.StatusBadRequest)
			return
		}
	}
	prompt, ok := uint32s(body["input_ids"])
	if !ok || len(prompt) == 0 {
		http.Error(w, `{"error":{"message":"input_ids required"}}`, http.StatusBadRequest)
		return
	}
	sp, _ := body["sampling_params"].(map[string]any)
	stop, _ := uint32s(sp["stop_token_ids"])
	req := Request{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	var output []uint32
	_, _, _, _ = e.run(r, req, prompt, outputCap(sp, "max_new_tokens", 16), stop, str(body["lora_path"]), str(body["cache_salt"]),
		func(tok uint32, i, cached int, finish string) error {
			output = append(output, tok)
			var fr any
			if finish != "" {
				fr = map[string]any{"type": finish}
			}
			// Cumulative output_ids, as SGLang streams by default.
			return sse(w, map[string]any{
				"text":       "",
				"output_ids": output,
				"meta_info": map[string]any{
					"id": str(body["rid"]), "finish_reason": fr,
					"prompt_tokens": len(prompt), "completion_tokens": len(output), "cached_tokens": cached,
				},
			})
		})
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
}

// metrics serves the engine's Prometheus names.
func (e *Engine) metrics(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	running, used, total := e.running, e.lru.Len(), e.cfg.NumGPUBlocks
	e.mu.Unlock()
	usage := float64(used) / float64(total)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	m := e.cfg.Model
	if e.cfg.Engine == VLLM {
		fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n")
		fmt.Fprintf(w, "vllm:num_requests_running{engine=\"0\",model_name=%q} %d\n", m, running)
		fmt.Fprintf(w, "vllm:num_requests_waiting{engine=\"0\",model_name=%q} 0\n", m)
		fmt.Fprintf(w, "vllm:kv_cache_usage_perc{engine=\"0\",model_name=%q} %g\n", m, usage)
		fmt.Fprintf(w, "vllm:prefix_cache_queries_total{engine=\"0\",model_name=%q} 100\n", m)
		fmt.Fprintf(w, "vllm:prefix_cache_hits_total{engine=\"0\",model_name=%q} 25\n", m)
		fmt.Fprintf(w, "vllm:num_preemptions_total{engine=\"0\",model_name=%q} 3\n", m)
		fmt.Fprintf(w, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"%d\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",num_cpu_blocks=\"0\",num_gpu_blocks=\"%d\",engine=\"0\"} 1.0\n", e.cfg.BlockSize, total)
		return
	}
	fmt.Fprintf(w, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=%q} %d\n", m, running)
	fmt.Fprintf(w, "sglang:num_queue_reqs{model_name=%q} 0\n", m)
	fmt.Fprintf(w, "sglang:token_usage{model_name=%q} %g\n", m, usage)
	fmt.Fprintf(w, "sglang:cache_hit_rate{model_name=%q} 0.5\n", m)
	fmt.Fprintf(w, "sglang:max_total_num_tokens{model_name=%q} %d\n", m, total*e.cfg.BlockSize)
	fmt.Fprintf(w, "sglang:page_size{model_name=%q} %d\n", m, e.cfg.BlockSize)
	fmt.Fprintf(w, "sglang:max_running_requests{model_name=%q} 64\n", m)
}
