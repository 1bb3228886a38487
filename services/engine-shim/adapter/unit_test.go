package adapter

import (
	"slices"
	"strings"
	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
)

func TestRankEndpoint(t *testing.T) {
	for _, tc := range []struct {
		ep   string
		rank int
		want string
		bad  bool
	}{
		{"tcp://127.0.0.1:5557", 0, "tcp://127.0.0.1:5557", false},
		{"tcp://127.0.0.1:5557", 3, "tcp://127.0.0.1:5560", false},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558", false},
		{"ipc:///tmp/kv", 2, "ipc:///tmp/kv_dp2", false},
		{"tcp://host:65535", 1, "", true},
		{"127.0.0.1:5557", 1, "", true},
		{"127.0.0.1:5557", 0, "", true},
		{"tcp://host:notaport", 0, "", true},
		{"tcp://host", 1, "", true},
	} {
		got, err := RankEndpoint(tc.ep, tc.rank)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("RankEndpoint(%q, %d) = %q, %v", tc.ep, tc.rank, got, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"sglang", func(c *Config) { c.Engine = SGLang }, true},
		{"unknown engine", func(c *Config) { c.Engine = "trt" }, false},
		{"no worker", func(c *Config) { c.WorkerID = "" }, false},
		{"engine block size multiple", func(c *Config) { c.EngineBlockSize = 64 }, true},
		{"engine block size divisor", func(c *Config) { c.EngineBlockSize = 1 }, true},
		{"engine block size neither", func(c *Config) { c.EngineBlockSize = 24 }, false},
		{"dp ranks past the last port", func(c *Config) { c.EventsEndpoint = "tcp://h:65535"; c.DPSize = 2 }, false},
		// Parsed as scheme "localhost": every request would fail, not the start.
		{"engine url without a scheme", func(c *Config) { c.URL = "localhost:8000" }, false},
		{"engine url not http", func(c *Config) { c.URL = "tcp://127.0.0.1:8000" }, false},
		{"engine url https", func(c *Config) { c.URL = "https://engine.local:8443/" }, true},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		_, err := New(c, nil, nil)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
vllm:num_requests_waiting{model_name="m"} 4 1700000000000
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:gpu_prefix_cache_hits_total{model_name="m"} 30
vllm:gpu_prefix_cache_queries_total{model_name="m"} 120
vllm:cache_config_info{block_size="32",num_gpu_blocks="2000",num_cpu_blocks="500",note="a \"quoted\" value"} 1.0
process_cpu_seconds_total 12.5
`
	samples, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 8 || samples[6].labels["note"] != `a "quoted" value` {
		t.Fatalf("samples %+v", samples)
	}
	sc := summarize(VLLM, samples)
	if sc.running != 5 || sc.waiting != 4 || sc.usage != 0.5 || sc.hits != 30 || sc.queries != 120 ||
		sc.engineBlockSize != 32 || sc.gpuBlocks != 2000 || sc.cpuBlks != 500 {
		t.Fatalf("summary %+v", sc)
	}
	b, err := New(Config{Engine: VLLM, WorkerID: "w", URL: "http://x", BlockSize: 16}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.scraped = sc
	c := b.Capacity()
	// 2000 engine blocks of 32 tokens = 4000 Switchyard blocks of 16.
	if c.GetGpuBlocks() != 4000 || c.GetHostBlocks() != 1000 || c.GetKvCapacityTokens() != 80000 {
		t.Fatalf("capacity %v", c)
	}
	if l := b.Load(); l.GetUsedKvBlocks() != 2000 || l.GetPrefixHitRate() != 0.25 || l.GetRunningRequests() != 5 {
		t.Fatalf("load %v", l)
	}
	for _, bad := range []string{"novalue", `x{a="1" 2`, `x{a=1} 2`, "x abc"} {
		if _, err := parseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestSGLangStreamModes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   []uint32
	}{
		{"cumulative", []string{
			`{"output_ids":[5],"meta_info":{"completion_tokens":1,"prompt_tokens":3,"cached_tokens":2,"finish_reason":null}}`,
			`{"output_ids":[5,6],"meta_info":{"completion_tokens":2}}`,
			`{"output_ids":[5,6,7],"meta_info":{"completion_tokens":3,"finish_reason":{"type":"stop","matched":7}}}`,
		}, []uint32{5, 6, 7}},
		{"incremental", []string{
			`{"output_ids":[5],"meta_info":{"completion_tokens":1}}`,
			`{"output_ids":[6],"meta_info":{"completion_tokens":2}}`,
			`{"output_ids":[7,8],"meta_info":{"completion_tokens":4,"finish_reason":"length"}}`,
		}, []uint32{5, 6, 7, 8}},
	} {
		var g genState
		var got []uint32
		for _, c := range tc.chunks {
			toks, err := g.sglangChunk([]byte(c))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, toks...)
		}
		if len(got) != len(tc.want) || g.finish == enginev1.FinishReason_FINISH_REASON_UNSPECIFIED {
			t.Errorf("%s: got %v finish %v", tc.name, got, g.finish)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got %v", tc.name, got)
			}
		}
	}
}

func TestReadSSE(t *testing.T) {
	in := ": comment\nevent: x\ndata: {\"a\":1}\n\ndata:{\"b\":2}\n\ndata: [DONE]\n\ndata: {\"after\":1}\n"
	var got []string
	if err := readSSE(strings.NewReader(in), func(d []byte) error { got = append(got, string(d)); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != `{"a":1}|{"b":2}` {
		t.Fatalf("got %v", got)
	}
}

func TestHints(t *testing.T) {
	now := time.Unix(1000, 0)
	act := func(id string, p any) *kvv1.KvHintAction {
		a := &kvv1.KvHintAction{ActionId: id}
		switch v := p.(type) {
		case *kvv1.RetainHint:
			a.Payload = &kvv1.KvHintAction_Retain{Retain: v}
		case *kvv1.PinHint:
			a.Payload = &kvv1.KvHintAction_Pin{Pin: v}
		case *kvv1.ShareHint:
			a.Payload = &kvv1.KvHintAction_Share{Share: v}
		case *kvv1.PrefetchHint:
			a.Payload = &kvv1.KvHintAction_Prefetch{Prefetch: v}
		case *kvv1.DemoteHint:
			a.Payload = &kvv1.KvHintAction_Demote{Demote: v}
		case *kvv1.ReleaseSessionHint:
			a.Payload = &kvv1.KvHintAction_ReleaseSession{ReleaseSession: v}
		}
		return a
	}
	actions := []*kvv1.KvHintAction{
		act("retain", &kvv1.RetainHint{SessionId: "s", Priority: 50, TtlSeconds: 60}),
		act("retain-high", &kvv1.RetainHint{SessionId: "s2", Priority: 500}),
		act("retain-nosession", &kvv1.RetainHint{Priority: 5}),
		act("pin", &kvv1.PinHint{SessionId: "s3", TtlSeconds: 10}),
		act("share", &kvv1.ShareHint{SessionId: "s"}),
		act("prefetch", &kvv1.PrefetchHint{SessionId: "s"}),
		act("demote", &kvv1.DemoteHint{SessionId: "s"}),
		act("release", &kvv1.ReleaseSessionHint{SessionId: "s2"}),
		act("empty", nil),
	}
	R := kvv1.HintResult_HINT_RESULT_REJECTED
	D := kvv1.HintResult_HINT_RESULT_DEFERRED
	C := kvv1.HintResult_HINT_RESULT_CLIPPED
	A := kvv1.HintResult_HINT_RESULT_ACCEPTED
	for _, tc := range []struct {
		engine    Engine
		retention bool
		want      []kvv1.HintResult
	}{
		{SGLang, false, []kvv1.HintResult{D, C, R, C, R, R, R, A, R}},
		{VLLM, false, []kvv1.HintResult{R, R, R, R, R, R, R, A, R}},
		{VLLM, true, []kvv1.HintResult{D, C, R, C, R, R, R, A, R}},
	} {
		b, err := New(Config{Engine: tc.engine, WorkerID: "w", URL: "http://x", VLLMRetention: tc.retention}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := b.ApplyHints(actions, now)
		for i, o := range out {
			if o.GetResult() != tc.want[i] || o.GetActionId() != actions[i].GetActionId() || o.GetReason() == "" {
				t.Errorf("%s retention=%v %s: %v %q", tc.engine, tc.retention, actions[i].GetActionId(), o.GetResult(), o.GetReason())
			}
		}
		if tc.want[0] != D {
			continue
		}
		// Retention rides on the session's next requests until it expires.
		r, ok := b.hints.get("s", now.Add(59*time.Second))
		if !ok || r.priority != 50 || r.ttl != 60 {
			t.Errorf("%s: retention %+v %v", tc.engine, r, ok)
		}
		if _, ok := b.hints.get("s", now.Add(61*time.Second)); ok {
			t.Errorf("%s: retention outlived its ttl", tc.engine)
		}
		if _, ok := b.hints.get("s2", now); ok {
			t.Errorf("%s: released session kept its retention", tc.engine)
		}
		req := &enginev1.GenerateRequest{TokenIds: []uint32{1}}
		r3, _ := b.hints.get("s3", now)
		var body map[string]any
		if tc.engine == SGLang {
			body = b.sglangBody(req, r3, true)
			if body["priority"] != 99 || body["retention_seconds"] != uint32(10) {
				t.Errorf("sglang body %v", body)
			}
		} else {
			body = b.vllmBody(req, r3, true)
			if body["retention_directives"] == nil {
				t.Errorf("vllm body %v", body)
			}
		}
	}
}

// TestStopStringsReachTheEngine: a request's stop sequences go to vLLM as
// "stop" and to SGLang in sampling_params, so that the engine ends the
// request there; a request without them sends none (SGLang refuses
// unknown fields, and an empty list is no stop).
func TestStopStringsReachTheEngine(t *testing.T) {
	for _, engine := range []Engine{VLLM, SGLang} {
		b, err := New(Config{Engine: engine, WorkerID: "w", URL: "http://x"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		stops := func(req *enginev1.GenerateRequest) (any, bool) {
			if engine == SGLang {
				sp, _ := b.sglangBody(req, retention{}, false)["sampling_params"].(map[string]any)
				v, ok := sp["stop"]
				return v, ok
			}
			v, ok := b.vllmBody(req, retention{}, false)["stop"]
			return v, ok
		}
		req := &enginev1.GenerateRequest{TokenIds: []uint32{1}, Sampling: &enginev1.SamplingParams{Stop: []string{"\nUser:", "END"}}}
		if got, ok := stops(req); !ok || !slices.Equal(got.([]string), []string{"\nUser:", "END"}) {
			t.Errorf("%s: stop %v (sent %v), want the request's", engine, got, ok)
		}
		if got, ok := stops(&enginev1.GenerateRequest{TokenIds: []uint32{1}}); ok {
			t.Errorf("%s: a request without stop sequences sent stop %v", engine, got)
		}
	}
}

// TestVLLMPriority: the request priority reaches vLLM only when it runs
// priority scheduling (its FCFS policy refuses a non-zero priority).
func TestVLLMPriority(t *testing.T) {
	for _, on := range []bool{false, true} {
		b, err := New(Config{Engine: VLLM, WorkerID: "w", URL: "http://x", VLLMPriority: on}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		body := b.vllmBody(&enginev1.GenerateRequest{TokenIds: []uint32{1}, Priority: -1}, retention{}, false)
		if got, sent := body["priority"]; sent != on || (on && got != int32(-1)) {
			t.Errorf("--vllm-priority-scheduling=%v: priority %v (sent %v)", on, got, sent)
		}
		if _, sent := b.vllmBody(&enginev1.GenerateRequest{TokenIds: []uint32{1}}, retention{}, false)["priority"]; sent {
			t.Errorf("--vllm-priority-scheduling=%v: priority 0 sent", on)
		}
	}
}

// TestRequestRetention: a request the scheduler asks to retain carries the
// retention to SGLang and to a vLLM build with retention directives, at
// ResidentRetainPriority unless a hint set the session's; a vLLM release
// gets none, and the dropped retention is counted.
func TestRequestRetention(t *testing.T) {
	now := time.Now()
	req := &enginev1.GenerateRequest{RequestId: "r", TokenIds: []uint32{1}, RetentionSeconds: 300,
		Agent: &agentv1.AgentContext{SessionId: "s"}}
	for _, tc := range []struct {
		name      string
		engine    Engine
		retention bool
		want      bool
	}{
		{"sglang", SGLang, false, true},
		{"vllm with retention directives", VLLM, true, true},
		{"vllm release", VLLM, false, false},
	} {
		b, err := New(Config{Engine: tc.engine, WorkerID: "w", URL: "http://x", VLLMRetention: tc.retention}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ret, ok := b.retentionOf(req, "s", now)
		if ok != tc.want || (ok && (ret.priority != 50 || ret.ttl != 300)) {
			t.Errorf("%s: retention %+v %v, want %v at priority 50 for 300 s", tc.name, ret, ok, tc.want)
		}
		if got := b.Stats().RetentionDropped; (got == 1) == tc.want {
			t.Errorf("%s: %d retentions counted dropped", tc.name, got)
		}
		// A retain hint for the session takes the place of the request's.
		b.hints.set("s", retention{priority: 80, ttl: 60}, now)
		if ret, ok := b.retentionOf(req, "s", now); tc.want && (!ok || ret.priority != 80) {
			t.Errorf("%s: with a hint, retention %+v %v, want the hint's", tc.name, ret, ok)
		}
		// No retention asked, none sent.
		if _, ok := b.retentionOf(&enginev1.GenerateRequest{}, "other", now); ok {
			t.Errorf("%s: retention for a request that asked none", tc.name)
		}
	}
}

func TestCollector(t *testing.T) {
	b, err := New(Config{Engine: VLLM, WorkerID: "w", URL: "http://x"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(b.Collector(func(s string) string { return "switchyard_engine_shim_" + s })); err != nil {
		t.Fatal(err)
	}
	b.stats.gaps.Add(2)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_engine_shim_engine_event_sequence_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == "gap" {
					found = m.GetCounter().GetValue() == 2
				}
			}
		}
	}
	if !found {
		t.Fatal("gap counter not exported as 2")
	}
}

func TestBindHost(t *testing.T) {
	for ep, want := range map[string]bool{
		"tcp://*:5557":         true,
		"tcp://0.0.0.0:5557":   true,
		"tcp://127.0.0.1:5557": false,
		"tcp://vllm-0:5557":    false,
	} {
		if got := bindHost(ep); got != want {
			t.Errorf("bindHost(%q) = %v", ep, got)
		}
	}
}
