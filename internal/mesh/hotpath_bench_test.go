package mesh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard.dev/internal/mesh"
	"switchyard.dev/internal/servicecpu"
)

// The hot path, as an operator sizing a deployment would try it: the whole
// mesh in this process (four simulated workers, 1000× faster than the
// modelled GPU), eight agent sessions at once (-hotpath-sessions), each turn resending its whole
// growing context through the frontend's chat API. Each size is one prompt
// length; every session's first turn (a cold prefill) is sent before the
// measurement, so the measured turns are warm: cached on their worker, the
// frontend's per-session preprocessing warm (-hotpath-policy says why the
// policy is session_aware).
//
// Reported per turn, from a CPU profile of the process split by service
// (mesh.ServiceLabel): each service's CPU, the control plane's (frontend,
// scheduler, both indexers, hint emitter), the simulated engine's apart
// from its shim's, what no service's goroutine ran (garbage collection's
// background workers, the runtime), and the mesh's whole CPU (the process's
// minus the benchmark's own client); the turns' latency p50/p99 as the
// client saw it, and added-p50/p99: each turn's latency less its engine's
// own time (arrival to last token, from the answer's Server-Timing header:
// its queue, its simulated steps and the simulated engine's CPU, 0.1–1 ms
// a turn), what the frontend, scheduler, indexers, shim, the hops between
// them and the client's own HTTP work on the same cores add, in three
// parts (outside-, route- and inside-p50/p99: see hotPathStats.added); and
// the turns per second the two cores sustained.
//
//	go test ./internal/mesh -run '^$' -bench HotPath -benchtime 400x -count 6
//
// (Not under -cpuprofile: the benchmark runs its own profile, which
// -hotpath-profile DIR writes to DIR/hotpath-<size>.pprof; `go tool pprof
// -tagfocus service=scheduler` shows one service's part.)
func BenchmarkHotPath(b *testing.B) {
	for _, size := range []int{2_000, 20_000, 100_000} {
		b.Run(fmt.Sprintf("tokens=%dk", size/1000), func(b *testing.B) { benchHotPath(b, size, replicas{1, 1}, 0) })
	}
}

// BenchmarkHotPathPaced is the 100k case with each session pausing
// hotPathThink between turns, as an agent does while its tools run, so that
// the eight sessions' turns seldom wait for each other's CPU: its p50 is the
// latency of a turn's own path (the engine's time included; added-p50
// leaves it out), where
// BenchmarkHotPath's, a closed loop on two cores, is mostly queueing (by
// Little's law about 8 × CPU per turn / 2 cores).
//
//	go test ./internal/mesh -run '^$' -bench HotPathPaced -benchtime 1000x -count 4
//
// Its second case, direct, sends the same paced turns to a bare HTTP server
// instead (bareExchange): what the client's HTTP exchange costs with no
// Switchyard in the way, the floor that any server in front of an engine
// pays. The latency the mesh adds over a direct call to an engine is at
// most the mesh's added-p50 less direct's p50 (at most, because an
// engine's own HTTP server does more than this one: it also parses the
// body and tokenizes the prompt, which the mesh's frontend does for it).
func BenchmarkHotPathPaced(b *testing.B) {
	b.Run("tokens=100k", func(b *testing.B) { benchHotPath(b, 100_000, replicas{1, 1}, *hotPathThink) })
	b.Run("tokens=100k,direct", func(b *testing.B) { benchHotPath(b, 100_000, replicas{}, *hotPathThink) })
}

// BenchmarkReplicas is the hot path at 20k tokens with one scheduler, with
// three (their CPU summed: scheduler-us/turn is every replica's, the
// streams of each other's admission use included), and with two frontends
// that a session's turns alternate between (each frontend's per-session
// preprocessing then sees every other turn: frontend-us/turn says what the
// misses cost).
//
//	go test ./internal/mesh -run '^$' -bench Replicas -benchtime 400x -count 6
func BenchmarkReplicas(b *testing.B) {
	for _, r := range []replicas{{1, 1}, {3, 1}, {1, 2}} {
		b.Run(fmt.Sprintf("schedulers=%d,frontends=%d", r.schedulers, r.frontends), func(b *testing.B) { benchHotPath(b, 20_000, r, 0) })
	}
}

// replicas is how many schedulers and frontends a benchmark's mesh runs.
type replicas struct{ schedulers, frontends int }

var (
	hotPathProfile = flag.String("hotpath-profile", "", "directory to write BenchmarkHotPath's CPU profiles to")
	// session_aware keeps every turn on the worker holding its prefix (its
	// moved-fraction is 0), so the turns measured are warm ones; under kv,
	// the scheduler's default, 44–55 % of these turns move to a worker
	// without their prefix (docs/benchmarks.md), and a moved turn is a cold
	// one.
	hotPathPolicy = flag.String("hotpath-policy", "session_aware", "BenchmarkHotPath's routing policy")
	// More sessions put more turns in flight at once, so each server has
	// more messages to put in one write: how the replicas' cost moves with
	// load (docs/scale-out.md).
	hotPathSessions = flag.Int("hotpath-sessions", 8, "sessions BenchmarkHotPath and BenchmarkReplicas run at once")
	// At the default 20 ms, eight sessions offer about 8 / (20 ms +
	// latency) turns a second, a fraction of what two cores sustain at
	// 100k; a longer pause shows the path's latency with less queueing.
	// 250 Hz is the most a CPU profile samples at on a kernel that ticks
	// 250 times a second (servicecpu.Measure): two and a half times
	// pprof's default, so a service's figure over the same turns is good to
	// about 1/1.6 of the default's error.
	hotPathHz    = flag.Int("hotpath-hz", 250, "BenchmarkHotPath's CPU profile rate (samples a second; at most the kernel's tick rate)")
	hotPathThink = flag.Duration("hotpath-think", 20*time.Millisecond, "BenchmarkHotPathPaced's pause between a session's turns")
)

const hotPathSpeedUp = 1000

// The services whose CPU is the control plane's.
var controlPlane = []string{"frontend", "scheduler", "flash-indexer", "session-prefix-indexer", "kvhint-emitter"}

// apartEngine counts the simulated engine's work apart from its shim's.
var apartEngine = []servicecpu.Apart{{Prefix: "switchyard.dev/pkg/enginesim.", Name: "engine (simulated)"}}

// think is each session's pause after each of its turns (0: none); reps
// zero (no scheduler, no frontend) sends the turns to bareExchange instead
// of a mesh.
func benchHotPath(b *testing.B, size int, reps replicas, think time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	direct := reps == replicas{}
	var bases []string // a session's turns go to each in turn
	if direct {
		srv := httptest.NewServer(bareExchange{})
		defer srv.Close()
		bases = []string{srv.URL}
	} else {
		m := startHotPathMesh(ctx, b, reps)
		defer func() {
			cancel()
			if err := m.Wait(); err != nil {
				b.Errorf("mesh stopped with: %v", err)
			}
		}()
		for _, ep := range m.Endpoints {
			if ep.Service == "frontend" {
				bases = append(bases, "http://"+ep.HTTP)
			}
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *hotPathSessions}}
	defer client.CloseIdleConnections()

	// The client's goroutines carry their own label, so their CPU (building
	// the bodies, decoding the answers) is not the mesh's.
	var stats hotPathStats
	pprof.Do(ctx, pprof.Labels(mesh.ServiceLabel, "client"), func(ctx context.Context) {
		// Sessions take turns from a queue, each for turnsPerSession(size)
		// turns at a time, so that the prompts measured stay near size
		// (a session run for all of b.N would grow by about 25 tokens a
		// turn: a 2k session to 7k over 2,000 turns). Every session's
		// first turn is sent before the measurement; the queue holds what
		// a quarter of the simulated fleet's KV keeps, and cycles when b.N
		// needs more (past 1,600 turns at 2k, 3,600 at 100k: the
		// prompt-tokens metric says by how much they grew). The queue is
		// filled in the reverse of the order the sessions were warmed in,
		// so that the first used are the last the workers' LRU would
		// evict.
		warm := make([]*agentSession, hotPathPoolSize(size, b.N))
		for i := range warm {
			warm[i] = newAgentSession(fmt.Sprintf("hot-%d-%d-%d", size, b.N, i), size, uint64(i))
			if _, err := warm[i].turn(ctx, client, bases); err != nil { // the cold turn
				b.Fatal(err)
			}
		}
		pool := make(chan *agentSession, len(warm))
		for _, s := range slices.Backward(warm) {
			pool <- s
		}
		var next atomic.Int64
		b.ResetTimer()
		start := time.Now()
		split, err := servicecpu.Measure(mesh.ServiceLabel, apartEngine, *hotPathHz, func() error {
			var wg sync.WaitGroup
			errs := make([]error, *hotPathSessions)
			for i := range errs {
				wg.Go(func() {
					for next.Load() < int64(b.N) {
						s := <-pool
						for range turnsPerSession(size) {
							if next.Add(1) > int64(b.N) {
								break
							}
							t, err := s.turn(ctx, client, bases)
							if err != nil {
								errs[i] = err
								pool <- s
								return
							}
							stats.add(t)
							time.Sleep(think)
						}
						pool <- s
					}
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if *hotPathProfile != "" {
			if err := os.MkdirAll(*hotPathProfile, 0o755); err != nil {
				b.Fatal(err)
			}
			name := filepath.Join(*hotPathProfile, fmt.Sprintf("hotpath-%dk.pprof", size/1000))
			if err := os.WriteFile(name, split.Profile, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		stats.report(b, split, elapsed, direct)
	})
}

// startHotPathMesh starts the benchmark's mesh: reps' schedulers and
// frontends, four simulated workers hotPathSpeedUp times the modelled GPU.
func startHotPathMesh(ctx context.Context, b *testing.B, reps replicas) *mesh.Mesh {
	cfg := mesh.DefaultConfig()
	cfg.Schedulers, cfg.Frontends = reps.schedulers, reps.frontends
	cfg.FrontendHTTPAddr = "127.0.0.1:0"
	cfg.SpeedUp = hotPathSpeedUp
	cfg.Policy = *hotPathPolicy
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	// Each answer says how long its engine took: the latency the mesh adds
	// is the rest.
	cfg.ServerTiming = true
	m, err := mesh.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// bareExchange is BenchmarkHotPathPaced's direct case: an HTTP server that
// reads each turn's whole body and answers as the frontend's non-streamed
// chat completion is shaped, with eight words of content and no engine
// behind it (its Server-Timing names no route and no engine time). It is
// the HTTP exchange alone, the part of a turn's latency that no server in
// front of an engine can take away.
type bareExchange struct{}

// bareAnswer is what every turn gets: the size of the mesh's answers to the
// benchmark's turns (eight tokens of content, usage, identifiers).
var bareAnswer = []byte(`{"id":"chatcmpl-bare","object":"chat.completion","created":1765000000,` +
	`"model":"switchyard-sim","choices":[{"index":0,"message":{"role":"assistant",` +
	`"content":"read the file then change one function and"},"finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":0,"completion_tokens":8,"total_tokens":8}}`)

func (bareExchange) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Server-Timing", fmt.Sprintf("route;dur=0, engine;dur=0, total;dur=%.3f",
		float64(time.Since(start).Microseconds())/1000))
	w.Write(bareAnswer)
}

// turnsPerSession is how many turns a session runs before it goes back to
// the queue: about a tenth of size in growth.
func turnsPerSession(size int) int { return max(1, size/250) }

// hotPathPoolSize is how many sessions benchHotPath keeps warm: enough that
// none runs more than turnsPerSession turns in all, no more than about 400k
// tokens of them (a quarter of the four simulated workers' KV at the
// default preset) so that none is evicted before its turns, and always one
// more than the sessions that run at once, so that each can hand over.
func hotPathPoolSize(size, turns int) int {
	need := turns/turnsPerSession(size) + 2**hotPathSessions
	return max(*hotPathSessions+1, min(need, 400_000/size))
}

// agentSession is one conversation that grows by a short answer and a short
// user message per turn, on top of a system prompt of about size tokens.
type agentSession struct {
	id string
	// messages is the conversation's messages array as JSON, without its
	// brackets: each turn appends its two new messages, encoded once, so
	// that the client (on the same cores as the mesh) does not re-encode
	// the whole history every turn.
	messages []byte
	n        int    // messages in it
	worker   string // the last turn's
	turns    int
}

func newAgentSession(id string, size int, seed uint64) *agentSession {
	s := &agentSession{id: id}
	s.add("system", words(size, seed))
	s.add("user", words(12, seed+1000))
	return s
}

// add appends a message to the conversation.
func (s *agentSession) add(role, content string) {
	m, err := json.Marshal(map[string]string{"role": role, "content": content})
	if err != nil {
		panic(err) // strings always encode
	}
	if s.n > 0 {
		s.messages = append(s.messages, ',')
	}
	s.messages = append(s.messages, m...)
	s.n++
}

// body is the turn's request body.
func (s *agentSession) body() []byte {
	const head, tail = `{"model":"switchyard-sim","max_tokens":8,"messages":[`, `]}`
	b := make([]byte, 0, len(head)+len(s.messages)+len(tail))
	return append(append(append(b, head...), s.messages...), tail...)
}

// words is about n tokens of text: n words from a small vocabulary, drawn
// from seed so that sessions share no prefix.
func words(n int, seed uint64) string {
	vocab := strings.Fields("read the file then change one function and run its tests again before you commit " +
		"build parse route cache block worker session prompt token index engine reply tool call result error")
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(vocab[r.IntN(len(vocab))])
	}
	return sb.String()
}

// turnResult is what one turn measured.
type turnResult struct {
	latency              time.Duration
	timing               serverTiming
	promptTokens, cached int
	moved                bool // served by another worker than the session's previous turn
}

// turn sends the session's next turn, to the next of bases, and appends
// its answer and a new user message.
func (s *agentSession) turn(ctx context.Context, client *http.Client, bases []string) (turnResult, error) {
	base := bases[s.turns%len(bases)]
	s.turns++
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(s.body()))
	if err != nil {
		return turnResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-dynamo-session-id", s.id)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return turnResult{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	lat := time.Since(start)
	if err != nil {
		return turnResult{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return turnResult{}, fmt.Errorf("session %s: status %d: %s", s.id, resp.StatusCode, body)
	}
	var out chatResponse
	if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 {
		return turnResult{}, fmt.Errorf("session %s: bad body %.200s (%v)", s.id, body, err)
	}
	timing, err := parseServerTiming(resp.Header.Get("Server-Timing"))
	if err != nil {
		return turnResult{}, fmt.Errorf("session %s: %w", s.id, err)
	}
	w := resp.Header.Get("X-Switchyard-Worker")
	moved := s.worker != "" && w != s.worker
	s.worker = w
	s.add("assistant", out.Choices[0].Message.Content)
	s.add("user", words(12, uint64(s.n)))
	return turnResult{latency: lat, timing: timing, promptTokens: out.Usage.PromptTokens, cached: out.Usage.PromptTokensDetails.CachedTokens, moved: moved}, nil
}

// serverTiming is what a frontend's Server-Timing header says of a turn:
// its Route calls' time, the engine's own time (arrival to last token) and
// the frontend's total, from the request's arrival.
type serverTiming struct{ route, engine, total time.Duration }

func parseServerTiming(header string) (serverTiming, error) {
	var t serverTiming
	metrics := map[string]*time.Duration{"route": &t.route, "engine": &t.engine, "total": &t.total}
	for m := range strings.SplitSeq(header, ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(m), ";dur=")
		if d := metrics[name]; ok && d != nil {
			ms, err := strconv.ParseFloat(dur, 64)
			if err != nil {
				return t, fmt.Errorf("Server-Timing %q: %w", header, err)
			}
			*d = time.Duration(ms * float64(time.Millisecond))
			delete(metrics, name)
		}
	}
	if len(metrics) > 0 {
		return t, fmt.Errorf("Server-Timing %q lacks %d of route, engine and total", header, len(metrics))
	}
	return t, nil
}

// hotPathStats gathers the measured turns.
type hotPathStats struct {
	mu        sync.Mutex
	latencies []time.Duration
	// added are the latencies less their engine's time, and their parts:
	// outside the frontend (the client's and the kernel's side of the HTTP
	// exchange, before the frontend's clock starts or after it stops),
	// route (the Route calls) and inside (the rest of the frontend's
	// total: preparing the turn, the shim and the hops to it, finishing).
	added, outside, route, inside []time.Duration
	promptTokens, cached          int
	moved                         int
}

func (s *hotPathStats) add(t turnResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latencies = append(s.latencies, t.latency)
	s.added = append(s.added, t.latency-t.timing.engine)
	s.outside = append(s.outside, t.latency-t.timing.total)
	s.route = append(s.route, t.timing.route)
	s.inside = append(s.inside, t.timing.total-t.timing.route-t.timing.engine)
	s.promptTokens += t.promptTokens
	s.cached += t.cached
	if t.moved {
		s.moved++
	}
}

// report reports the turns' figures; direct (the bare exchange, no mesh)
// only their latency and rate, as no service ran.
func (s *hotPathStats) report(b *testing.B, split servicecpu.Split, elapsed time.Duration, direct bool) {
	n := float64(len(s.latencies))
	if n == 0 {
		return
	}
	for _, q := range []struct {
		name string
		d    []time.Duration
	}{{"", s.latencies}, {"added-", s.added}, {"outside-", s.outside}, {"route-", s.route}, {"inside-", s.inside}} {
		if direct && q.name != "" {
			continue
		}
		slices.Sort(q.d)
		b.ReportMetric(float64(q.d[len(q.d)/2].Microseconds())/1000, q.name+"p50-ms")
		b.ReportMetric(float64(q.d[len(q.d)*99/100].Microseconds())/1000, q.name+"p99-ms")
	}
	b.ReportMetric(n/elapsed.Seconds(), "turns/s")
	if direct {
		return
	}
	perTurn := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	var cp time.Duration
	for _, svc := range controlPlane {
		cp += split.By[svc]
		b.ReportMetric(perTurn(split.By[svc]), svc+"-us/turn")
	}
	b.ReportMetric(perTurn(cp), "control-plane-us/turn")
	b.ReportMetric(perTurn(split.By["engine-shim"]), "shim-us/turn")
	b.ReportMetric(perTurn(split.By["engine (simulated)"]), "engine-us/turn")
	b.ReportMetric(perTurn(split.By[servicecpu.Unlabelled]), "unlabelled-us/turn")
	b.ReportMetric(perTurn(split.Process-split.By["client"]), "mesh-us/turn")
	b.ReportMetric(float64(s.promptTokens)/n, "prompt-tokens")
	b.ReportMetric(float64(s.cached)/float64(max(1, s.promptTokens)), "cached-fraction")
	b.ReportMetric(float64(s.moved)/n, "moved-fraction")
}
