package mesh_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	frontendv1 "switchyard.dev/gen/switchyard/frontend/v1"
	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/internal/mesh"
	"switchyard.dev/services/frontend"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/servicetest"
)

// zmq4 v0.17.0 never stops a PUB socket's writer goroutine; only the
// protocol fakes of real engines open PUB sockets.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// dial connects to addr for the rest of the test.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := servicekit.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startMesh runs a four-worker mesh on loopback for one test; opts adjust
// its configuration.
func startMesh(t *testing.T, opts ...func(*mesh.Config)) *mesh.Mesh {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := mesh.DefaultConfig()
	cfg.FrontendHTTPAddr = "127.0.0.1:0"
	cfg.SpeedUp = 20
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, opt := range opts {
		opt(&cfg)
	}
	m, err := mesh.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("start mesh: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := m.Wait(); err != nil {
			t.Errorf("mesh stopped with: %v", err)
		}
	})
	return m
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func postChat(t *testing.T, base, session string, body any) (*http.Response, []byte) {
	t.Helper()
	var headers map[string]string
	if session != "" {
		headers = map[string]string{"x-dynamo-session-id": session}
	}
	return postChatWith(t, base, headers, body)
}

// postChatWith sends a chat completion with the given headers.
func postChatWith(t *testing.T, base string, headers map[string]string, body any) (*http.Response, []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/chat/completions: %v", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// TestSecondTurnHitsCacheOnSameWorker is the path the foundation promises: a
// session's second turn, whose prompt extends the first, is routed to the
// worker that served the first and finds its prefix in that worker's KV cache.
func TestSecondTurnHitsCacheOnSameWorker(t *testing.T) {
	m := startMesh(t)
	base := "http://" + m.Endpoint("frontend").HTTP

	history := []message{
		{Role: "system", Content: "You are a careful coding agent. Read files before you change them, and explain every change you make in one short sentence."},
		{Role: "user", Content: "List the files of this repository and tell me which one starts the server."},
	}
	resp1, body1 := postChat(t, base, "e2e-session", map[string]any{"model": "switchyard-sim", "max_tokens": 24, "messages": history})
	if resp1.StatusCode != http.StatusOK {
		t.Fatalf("turn 1: status %d: %s", resp1.StatusCode, body1)
	}
	worker1 := resp1.Header.Get("X-Switchyard-Worker")
	if worker1 == "" {
		t.Fatalf("turn 1: no X-Switchyard-Worker header")
	}
	var turn1 chatResponse
	if err := json.Unmarshal(body1, &turn1); err != nil || len(turn1.Choices) != 1 {
		t.Fatalf("turn 1: bad body %s (%v)", body1, err)
	}
	if turn1.Usage.CompletionTokens == 0 || turn1.Choices[0].Message.Content == "" {
		t.Fatalf("turn 1: empty answer: %s", body1)
	}

	history = append(history,
		message{Role: "assistant", Content: turn1.Choices[0].Message.Content},
		message{Role: "user", Content: "Now open that file and summarise what its main function does."})
	resp2, body2 := postChat(t, base, "e2e-session", map[string]any{"model": "switchyard-sim", "max_tokens": 24, "messages": history})
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("turn 2: status %d: %s", resp2.StatusCode, body2)
	}
	if got := resp2.Header.Get("X-Switchyard-Worker"); got != worker1 {
		t.Fatalf("turn 2 went to %q, turn 1 to %q", got, worker1)
	}
	var turn2 chatResponse
	if err := json.Unmarshal(body2, &turn2); err != nil {
		t.Fatalf("turn 2: bad body %s (%v)", body2, err)
	}
	if turn2.Usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Fatalf("turn 2: no cached prompt tokens: %s", body2)
	}
	if turn2.Usage.PromptTokensDetails.CachedTokens >= turn2.Usage.PromptTokens {
		t.Fatalf("turn 2: cached %d of %d prompt tokens: the new suffix cannot be cached",
			turn2.Usage.PromptTokensDetails.CachedTokens, turn2.Usage.PromptTokens)
	}

	// The frontend's admin API, over gRPC, has the session with both turns.
	conn := dial(t, m.Endpoint("frontend").GRPC)
	got, err := frontendv1.NewFrontendAdminServiceClient(conn).GetSession(context.Background(), &frontendv1.GetSessionRequest{SessionId: "e2e-session"})
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	if s := got.GetSession(); s.GetTurns() != 2 || s.GetLastWorkerId() != worker1 || s.GetCachedTokens() == 0 {
		t.Fatalf("GetSession = %v, want 2 turns on %s with cached tokens", s, worker1)
	}
}

// A stop sequence ends the generation where the answer first holds it, not
// only the text shown: the engine stops there (the simulated one as vLLM and
// SGLang do on their stop strings), so the usage counts the tokens up to
// it, and the client is not kept waiting for a generation it will not see.
func TestStopSequenceEndsTheGeneration(t *testing.T) {
	m := startMesh(t)
	base := "http://" + m.Endpoint("frontend").HTTP
	ask := func(stop []string) chatResponse {
		t.Helper()
		body := map[string]any{"model": "switchyard-sim", "max_tokens": 300, "seed": 11,
			"messages": []message{{Role: "user", Content: "Say something long."}}}
		if stop != nil {
			body["stop"] = stop
		}
		resp, b := postChat(t, base, "", body)
		var out chatResponse
		if err := json.Unmarshal(b, &out); resp.StatusCode != http.StatusOK || err != nil || len(out.Choices) != 1 {
			t.Fatalf("stop %q: status %d: %s (%v)", stop, resp.StatusCode, b, err)
		}
		return out
	}
	whole := ask(nil)
	if whole.Usage.CompletionTokens < 20 {
		t.Fatalf("an answer of %d tokens: %+v", whole.Usage.CompletionTokens, whole)
	}
	// Every word of the simulated model's vocabulary but a handful holds
	// one of these: the answer's first or second word completes a stop.
	stops := []string{"a", "e", "i", "o"}
	cut := ask(stops)
	got := cut.Choices[0].Message.Content
	if strings.ContainsAny(got, "aeio") || cut.Choices[0].FinishReason != "stop" {
		t.Errorf("with stops %q: %q, finish %q; want the text before the first of them, stop", stops, got, cut.Choices[0].FinishReason)
	}
	if n := cut.Usage.CompletionTokens; n < 1 || n > 3 {
		t.Errorf("with stops %q the engine generated %d tokens for %q (without them %d): it went on past the stop",
			stops, n, got, whole.Usage.CompletionTokens)
	}
}

func TestStreamingChat(t *testing.T) {
	m := startMesh(t)
	base := "http://" + m.Endpoint("frontend").HTTP
	resp, body := postChat(t, base, "e2e-stream", map[string]any{
		"model": "switchyard-sim", "max_tokens": 16, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []message{{Role: "user", Content: "Say something about caches."}},
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	if resp.Header.Get("X-Switchyard-Worker") == "" {
		t.Fatalf("no X-Switchyard-Worker header")
	}
	var content strings.Builder
	var sawDone, sawUsage bool
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			sawDone = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("bad chunk %q: %v", line, err)
		}
		for _, c := range chunk.Choices {
			content.WriteString(c.Delta.Content)
		}
		if chunk.Usage != nil && chunk.Usage.CompletionTokens > 0 {
			sawUsage = true
		}
	}
	if !sawDone || !sawUsage || content.Len() == 0 {
		t.Fatalf("stream incomplete (done=%v usage=%v content=%q):\n%s", sawDone, sawUsage, content.String(), body)
	}
}

// TestSimToolCallsReachTheFrontend: Config.SimToolCalls (up's
// --sim-tool-calls) makes a user message that declares tools come back as a
// call of the first tool, which is what lets real agent CLIs run tool-using
// turns against the mesh (scripts/conformance.sh); without it the same
// request is answered with text.
func TestSimToolCallsReachTheFrontend(t *testing.T) {
	tools := []map[string]any{
		{"type": "function", "function": map[string]any{"name": "read_file", "description": "Read a file.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []string{"path"}}}},
		{"type": "function", "function": map[string]any{"name": "list_dir", "description": "List a folder.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{}}}},
	}
	for _, tc := range []struct {
		sim       bool
		wantCalls []string // and finish_reason "tool_calls" exactly when there are some
	}{
		{sim: false},
		{sim: true, wantCalls: []string{"read_file"}},
	} {
		t.Run(fmt.Sprintf("sim=%v", tc.sim), func(t *testing.T) {
			m := startMesh(t, func(c *mesh.Config) { c.Workers, c.SimToolCalls = 1, tc.sim })
			resp, body := postChat(t, "http://"+m.Endpoint("frontend").HTTP, "sim-tools", map[string]any{
				"model": "switchyard-sim", "max_tokens": 64, "tools": tools,
				"messages": []message{{Role: "user", Content: "Read hello.txt and tell me what it says."}},
			})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got struct {
				Choices []struct {
					Message struct {
						ToolCalls []struct {
							Function struct {
								Name string `json:"name"`
							} `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(body, &got); err != nil || len(got.Choices) != 1 {
				t.Fatalf("bad body %s (%v)", body, err)
			}
			var calls []string
			for _, c := range got.Choices[0].Message.ToolCalls {
				calls = append(calls, c.Function.Name)
			}
			finish := got.Choices[0].FinishReason
			if (finish == "tool_calls") != (len(tc.wantCalls) > 0) || fmt.Sprint(calls) != fmt.Sprint(tc.wantCalls) {
				t.Fatalf("finish %q, tool calls %v; want tool calls %v: %s", finish, calls, tc.wantCalls, body)
			}
		})
	}
}

func TestInvalidSessionIDIsOpenAIError(t *testing.T) {
	m := startMesh(t)
	base := "http://" + m.Endpoint("frontend").HTTP
	resp, body := postChat(t, base, strings.Repeat("x", 300), map[string]any{
		"model": "switchyard-sim", "messages": []message{{Role: "user", Content: "hi"}},
	})
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", resp.StatusCode, body)
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error body: %s", body)
	}
}

// TestEveryServiceAnswersGRPCAndREST checks what an operator tries first:
// reflection lists each service's API (grpcurl needs no proto files) and the
// REST gateway reaches one unary RPC per service.
func TestEveryServiceAnswersGRPCAndREST(t *testing.T) {
	m := startMesh(t)
	wantService := map[string]string{
		"frontend":               "switchyard.frontend.v1.FrontendAdminService",
		"scheduler":              "switchyard.scheduler.v1.SchedulerService",
		"flash-indexer":          "switchyard.flashindex.v1.FlashIndexerService",
		"session-prefix-indexer": "switchyard.sessionindex.v1.SessionPrefixIndexerService",
		"kvhint-emitter":         "switchyard.kvhint.v1.KvHintEmitterService",
		"engine-shim":            "switchyard.engine.v1.EngineShimService",
	}
	restPath := map[string]string{
		"frontend":               "/v1/admin/sessions",
		"scheduler":              "/v1/workers",
		"flash-indexer":          "/v1/stats",
		"session-prefix-indexer": "/v1/sessions",
		"kvhint-emitter":         "/v1/policies",
		"engine-shim":            "/v1/load",
	}
	for _, ep := range m.Endpoints {
		t.Run(ep.Name, func(t *testing.T) {
			services := reflectionList(t, ep.GRPC)
			for _, want := range []string{wantService[ep.Service], "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
				if !contains(services, want) {
					t.Errorf("reflection on %s lists %v, missing %s", ep.GRPC, services, want)
				}
			}
			resp, err := http.Get("http://" + ep.HTTP + restPath[ep.Service])
			if err != nil {
				t.Fatalf("GET %s: %v", restPath[ep.Service], err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !json.Valid(body) {
				t.Fatalf("GET %s: status %d, body %s", restPath[ep.Service], resp.StatusCode, body)
			}
		})
	}

	// The scheduler's REST view has every worker.
	resp, err := http.Get("http://" + m.Endpoint("scheduler").HTTP + "/v1/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var workers struct {
		Workers []struct {
			WorkerID string `json:"workerId"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&workers); err != nil || len(workers.Workers) != 4 {
		t.Fatalf("GET /v1/workers: %d workers (%v), want 4", len(workers.Workers), err)
	}

	// FindMatches over gRPC answers for an unknown prompt with no overlap.
	conn := dial(t, m.Endpoint("flash-indexer").GRPC)
	res, err := flashindexv1.NewFlashIndexerServiceClient(conn).FindMatches(context.Background(), &flashindexv1.FindMatchesRequest{
		Query: &flashindexv1.FindMatchesRequest_Hashes{Hashes: &flashindexv1.BlockHashes{BlockHashes: []uint64{1, 2, 3}}},
	})
	if err != nil {
		t.Fatalf("FindMatches: %v", err)
	}
	if res.GetQueryBlocks() != 3 || len(res.GetOverlaps()) != 0 {
		t.Fatalf("FindMatches of unknown blocks: %v", res)
	}
}

func reflectionList(t *testing.T, addr string) []string {
	t.Helper()
	conn := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := grpc_reflection_v1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := stream.Send(&grpc_reflection_v1.ServerReflectionRequest{
		MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSharedPoolInTheMesh: with a kv-pool, what the simulated engines evict
// reaches the pool and the flash indexer follows the pool's events.
func TestSharedPoolInTheMesh(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) {
		c.Workers = 2
		c.GPUBlocks = 6 // 96 tokens: every new prompt evicts the last
		c.PoolPages = 1024
	})
	base := "http://" + m.Endpoint("frontend").HTTP
	for i := range 8 {
		resp, body := postChat(t, base, fmt.Sprintf("pool-%d", i), map[string]any{"model": "switchyard-sim", "max_tokens": 4, "messages": []message{
			{Role: "user", Content: fmt.Sprintf("Session %d: summarise the build scripts, the compose file and the test runner of this repository in one line each.", i)}}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	conn := dial(t, m.Endpoint("kv-pool").GRPC)
	pool := kvpoolv1.NewKvPoolServiceClient(conn)
	var st *kvpoolv1.GetStatsResponse
	if !servicetest.Poll(servicetest.Patience, func() bool {
		var err error
		if st, err = pool.GetStats(context.Background(), &kvpoolv1.GetStatsRequest{}); err != nil {
			t.Fatal(err)
		}
		metrics := servicetest.Get(t, "http://"+m.Endpoint("flash-indexer").HTTP+"/metrics")
		return st.GetPagesPut() > 0 && st.GetCompletePages() > 0 && metricAbove(metrics, "switchyard_flash_indexer_pool_events_total", 0)
	}) {
		t.Fatalf("pool stats %v; flash indexer never followed the pool's events", st)
	}
}

// metricAbove reports whether an unlabelled sample of name exceeds v.
func metricAbove(text, name string, v float64) bool {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return err == nil && x > v
		}
	}
	return false
}

// TestSecureMesh: on `up --secure` every service talks mutual TLS, the mesh
// comes up (Start waits until every worker is registered and its KV events
// are followed by the flash indexer, all through TLS), a session's second
// turn is a cache hit on its worker, and the control plane refuses plaintext
// and the wrong identity.
func TestSecureMesh(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) { c.Secure = true })
	base := "http://" + m.Endpoint("frontend").HTTP
	first := []message{{Role: "user", Content: strings.Repeat("Plan the refactor of the scheduler. ", 20)}}
	resp, body := postChat(t, base, "secure-session", map[string]any{"model": "switchyard-sim", "max_tokens": 8, "messages": first})
	if resp.StatusCode != 200 {
		t.Fatalf("turn 1 over the secure mesh: %d %s", resp.StatusCode, body)
	}
	w1 := resp.Header.Get("X-Switchyard-Worker")
	var c1 chatResponse
	json.Unmarshal(body, &c1)
	second := append(first, message{Role: "assistant", Content: c1.Choices[0].Message.Content}, message{Role: "user", Content: "Go on."})
	resp, body = postChat(t, base, "secure-session", map[string]any{"model": "switchyard-sim", "max_tokens": 8, "messages": second})
	var c2 chatResponse
	json.Unmarshal(body, &c2)
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Worker") != w1 || c2.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("turn 2: %d on %s (turn 1 on %s), cached %d",
			resp.StatusCode, resp.Header.Get("X-Switchyard-Worker"), w1, c2.Usage.PromptTokensDetails.CachedTokens)
	}

	sched := m.Endpoint("scheduler").GRPC
	register := func(opts ...grpc.DialOption) error {
		conn := dial(t, sched, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := schedulerv1.NewSchedulerServiceClient(conn).RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{
			Worker: &workerv1.Worker{WorkerId: "worker-0", Address: "attacker:1", BlockSize: 16}})
		return err
	}
	if err := register(); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext RegisterWorker: %v, want Unavailable", err)
	}
	src, err := m.CA.Source(servicekit.Identity{Service: "kvhint-emitter"})
	if err != nil {
		t.Fatal(err)
	}
	asEmitter := grpc.WithTransportCredentials(servicekit.ClientCredentials(src, m.CA.TrustDomain))
	if err := register(asEmitter); status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterWorker as the kvhint emitter: %v, want PermissionDenied", err)
	}

	// Hints: only the kvhint emitter may send them to a shim.
	hint := func(opts ...grpc.DialOption) error {
		conn := dial(t, m.Endpoint("engine-shim").GRPC, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := enginev1.NewEngineShimServiceClient(conn).ApplyKvHints(ctx, &enginev1.ApplyKvHintsRequest{})
		return err
	}
	if err := hint(); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext ApplyKvHints: %v, want Unavailable", err)
	}
	front, err := m.CA.Source(servicekit.Identity{Service: "frontend"})
	if err != nil {
		t.Fatal(err)
	}
	if err := hint(grpc.WithTransportCredentials(servicekit.ClientCredentials(front, m.CA.TrustDomain))); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ApplyKvHints as the frontend: %v, want PermissionDenied", err)
	}
	if err := hint(asEmitter); status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unavailable {
		t.Errorf("ApplyKvHints as the kvhint emitter: %v, want it let through", err)
	}
}

// TestTenantIsolation: tenant B sending tenant A's exact prompt gets no
// cached tokens and is not routed by A's blocks — the frontend salts each
// tenant's block hashes, so the router's index and the engine both see B's
// prompt as new, and B's turn is a full prefill like any cold prompt of its
// length (nothing in its answer or its timing depends on A's).
func TestTenantIsolation(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) {
		c.Frontend = func(fc *frontend.Config) { fc.APIKeys = map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"} }
	})
	base := "http://" + m.Endpoint("frontend").HTTP
	conn := dial(t, m.Endpoint("scheduler").GRPC)
	// A decision that never comes fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), servicetest.Patience)
	defer cancel()
	decisions, err := schedulerv1.NewSchedulerServiceClient(conn).WatchRouteDecisions(ctx, &schedulerv1.WatchRouteDecisionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler sends the headers once it has subscribed the watch: a
	// route before that would be missed, and its decision waited for in vain.
	if _, err := decisions.Header(); err != nil {
		t.Fatal(err)
	}

	prompt := map[string]any{"model": "switchyard-sim", "max_tokens": 4,
		"messages": []message{{Role: "user", Content: strings.Repeat("The secret plan of tenant A, step by step. ", 30)}}}
	send := func(key string) chatResponse {
		t.Helper()
		raw, _ := json.Marshal(prompt)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c chatResponse
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&c) != nil {
			t.Fatalf("%s: status %d", key, resp.StatusCode)
		}
		return c
	}
	decision := func() *schedulerv1.RouteDecision {
		t.Helper()
		d, err := decisions.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return d.GetDecision()
	}

	send("key-a")
	decision()
	if a2 := send("key-a"); a2.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatal("tenant A's repeat is no cache hit: the test would prove nothing")
	}
	if d := decision(); d.GetMatchedBlocks() == 0 {
		t.Fatal("tenant A's repeat was not routed by its blocks")
	}
	b := send("key-b")
	d := decision()
	if b.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("tenant B got %d cached tokens of tenant A's prompt", b.Usage.PromptTokensDetails.CachedTokens)
	}
	if d.GetTenant() != "tenant-b" || d.GetMatchedBlocks() != 0 {
		t.Errorf("tenant B's route (tenant %q) matched %d blocks of tenant A's", d.GetTenant(), d.GetMatchedBlocks())
	}
}

// TestPprofInTheMesh: with Pprof every service serves its profiles, the
// frontend's too (no keys, loopback: open to the operator at the machine).
func TestPprofInTheMesh(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) { c.Pprof = true })
	for _, svc := range []string{"frontend", "scheduler", "engine-shim"} {
		resp, err := http.Get("http://" + m.Endpoint(svc).HTTP + "/debug/pprof/symbol")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: GET /debug/pprof/symbol: %d", svc, resp.StatusCode)
		}
	}
}

// TestSecureMeshNamesItsHost: on a specific --host the services' certificates
// name it, so a client that checks host names (grpcurl, curl) accepts a
// service at the address the table prints; they named localhost only.
func TestSecureMeshNamesItsHost(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address to bind: %v", err)
	}
	probe.Close()
	m := startMesh(t, func(c *mesh.Config) { c.Secure, c.Host, c.Workers = true, "127.0.0.2", 1 })
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(m.CA.CertPEM)
	for _, service := range []string{"scheduler", "flash-indexer", "engine-shim"} {
		addr := m.Endpoint(service).GRPC
		host, _, _ := net.SplitHostPort(addr)
		if host != "127.0.0.2" {
			t.Fatalf("%s listens on %s, want 127.0.0.2", service, addr)
		}
		// The server asks for a client certificate; verifying its own
		// against the host is what this checks, so a handshake that gets
		// that far is enough.
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: host, NextProtos: []string{"h2"}})
		var hostErr x509.HostnameError
		if errors.As(err, &hostErr) {
			t.Errorf("%s at %s: %v", service, addr, err)
		}
		if c != nil {
			c.Close()
		}
	}
}

// The certificates name a specific host, and a name by the addresses it
// resolves to as well: a listener bound by name reports an address, which
// the table's commands dial.
func TestCertHostsNameWhatANameResolvesTo(t *testing.T) {
	for _, tc := range []struct {
		host, frontend string
		want           []string
	}{
		{"127.0.0.1", "127.0.0.1:8000", []string{"localhost"}},
		{"0.0.0.0", ":8000", []string{"localhost"}},
		{"127.0.0.2", "127.0.0.1:8000", []string{"localhost", "127.0.0.2"}},
		{"10.0.0.5", "10.0.0.6:8000", []string{"localhost", "10.0.0.5", "10.0.0.6"}},
	} {
		if got := mesh.CertHosts(context.Background(), tc.host, tc.frontend); !slices.Equal(got, tc.want) {
			t.Errorf("CertHosts(%q, %q) = %q, want %q", tc.host, tc.frontend, got, tc.want)
		}
	}
	name, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	addrs, err := net.LookupHost(name)
	if err != nil {
		t.Skipf("this machine's name does not resolve: %v", err)
	}
	got := mesh.CertHosts(context.Background(), name, "127.0.0.1:8000")
	for _, want := range append(addrs, name) {
		if ip := net.ParseIP(want); ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback)) {
			continue // localhost names those
		}
		if !slices.Contains(got, want) {
			t.Errorf("CertHosts(%q) = %q, want it to name %s", name, got, want)
		}
	}
}
