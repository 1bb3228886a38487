package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/trace"
)

const loadgenUsage = `Usage: switchyard loadgen --url http://127.0.0.1:8000 --trace <file|dir> --format <fmt> [flags]

Replays a trace's sessions against a live OpenAI-compatible endpoint
(/v1/chat/completions, streaming), sending each session's id in
x-dynamo-session-id (and its parent's in x-dynamo-parent-session-id). Prompts
are synthetic words derived from the trace's block ids, so turns that share
block ids share prompt prefixes. Closed loop: --concurrency sessions at once,
each turn after the previous one completes plus its tool gap (scaled by
--gap-scale); or --timed: sessions start at their trace start times.
Reports TTFT, ITL, token throughput and the server's cached tokens.

Flags:
`

// maxTokenScale bounds --token-scale: prompts are built in memory, and ten
// times the trace's lengths (its turns reach 131k tokens) is already far past
// any model's context.
const maxTokenScale = 10

// checkLoadgenFlags refuses values that would send nothing, or would build
// prompts no server takes, before any request is sent.
func checkLoadgenFlags(rawURL string, conc, sessions, maxTurns, maxRequests int, gapScale, tokenScale float64, timeout time.Duration) error {
	u, err := neturl.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want an http:// or https:// base URL", rawURL)
	}
	switch {
	case conc < 1:
		return fmt.Errorf("--concurrency %d: want at least 1", conc)
	case sessions < 0:
		return fmt.Errorf("--sessions %d: want 0 (all) or more", sessions)
	case maxTurns < 0:
		return fmt.Errorf("--max-turns %d: want 0 (all) or more", maxTurns)
	case maxRequests < 1:
		return fmt.Errorf("--max-requests %d: want at least 1", maxRequests)
	case !(gapScale >= 0) || math.IsInf(gapScale, 0):
		return fmt.Errorf("--gap-scale %v: want 0 (no gaps) or a positive number", gapScale)
	case !(tokenScale > 0) || tokenScale > maxTokenScale:
		return fmt.Errorf("--token-scale %v: want a number above 0 and at most %d", tokenScale, maxTokenScale)
	case timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration", timeout)
	}
	return nil
}

// loadgenCmd is `switchyard loadgen`.
func loadgenCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("loadgen", loadgenUsage, stderr)
	url := fs.String("url", "http://127.0.0.1:8000", "endpoint base URL (http:// or https://)")
	model := fs.String("model", "", "model name to send")
	tracePath := fs.String("trace", "", "trace file or directory (required)")
	format := fs.String("format", "weka", "trace format")
	traceBlock := fs.Int("trace-block-size", 0, "tokens per hash id for Mooncake formats")
	conc := fs.Int("concurrency", 4, "sessions at once (closed loop)")
	timed := fs.Bool("timed", false, "start sessions at their trace start times, times --gap-scale (which it needs), instead of closed loop")
	sessions := fs.Int("sessions", 4, "top-level sessions to replay (0 = all)")
	maxTurns := fs.Int("max-turns", 0, "turns per session (0 = all)")
	gapScale := fs.Float64("gap-scale", 0, "multiply tool gaps, and with --timed the sessions' start times, by this (0 = no gaps; 1 = as recorded)")
	tokenScale := fs.Float64("token-scale", 0.01, "scale prompt and output lengths, above 0 and at most 10 (live engines are slower than the simulator): a prompt is its trace blocks, each block-size × this words (at least one)")
	maxRequests := fs.Int("max-requests", 1000, "stop after this many requests")
	timeout := fs.Duration("timeout", 5*time.Minute, "overall time limit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *tracePath == "" {
		fs.Usage()
		return errUsage
	}
	if err := checkLoadgenFlags(*url, *conc, *sessions, *maxTurns, *maxRequests, *gapScale, *tokenScale, *timeout); err != nil {
		return err
	}
	if *timed && *gapScale == 0 {
		// The start times are scaled as the gaps are: at 0 every session
		// would start at once, which is the closed loop's burst, not the
		// trace's arrivals.
		return errors.New("--timed needs --gap-scale, the factor of the trace's start times and tool gaps (1 = as recorded)")
	}
	f, err := trace.ParseFormat(*format)
	if err != nil {
		return err
	}
	w, err := loadWorkload(*tracePath, f, trace.Options{BlockSize: *traceBlock}, stderr)
	if err != nil {
		return err
	}
	interrupted := ctx
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	lg := &loadgen{url: strings.TrimSuffix(*url, "/"), model: *model, w: w, client: &http.Client{},
		tokenScale: *tokenScale, gapScale: *gapScale, maxTurns: *maxTurns, budget: *maxRequests}
	var top []int
	for i, s := range w.Sessions {
		if s.Parent < 0 && (*sessions == 0 || len(top) < *sessions) {
			top = append(top, i)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	if *timed {
		for _, i := range top {
			wg.Go(func() {
				select {
				case <-time.After(time.Duration(float64(w.Sessions[i].Start) * *gapScale)):
					lg.session(ctx, i)
				case <-ctx.Done():
				}
			})
		}
	} else {
		next := make(chan int)
		for range max(*conc, 1) {
			wg.Go(func() {
				for i := range next {
					lg.session(ctx, i)
				}
			})
		}
	feed:
		for _, i := range top {
			select {
			case next <- i:
			case <-ctx.Done():
				break feed
			}
		}
		close(next)
	}
	wg.Wait()
	lg.report(stdout, time.Since(start))
	switch {
	case interrupted.Err() != nil:
		return errors.New("loadgen: interrupted")
	case lg.requests == 0 && lg.firstErr != nil:
		return lg.firstErr
	case lg.requests == 0:
		// An endpoint that never answered is no successful run.
		return fmt.Errorf("loadgen: no request completed within --timeout %v", *timeout)
	}
	return nil
}

type loadgen struct {
	url, model string
	w          *trace.Workload
	client     *http.Client
	tokenScale float64
	gapScale   float64
	maxTurns   int

	mu             sync.Mutex
	budget         int
	requests, errs int
	// cut are the requests the run's end (--timeout, an interrupt) cut
	// off: not the endpoint's errors.
	cut                     int
	firstErr                error
	ttft, itl               []float64
	promptTokens, outTokens int64
	cachedTokens            int64
}

// session runs one session closed-loop, its sub-agents alongside, each in
// its own goroutine. The session's walk says what comes next; only this
// goroutine touches it, so the sub-agents report their ends on a channel.
func (lg *loadgen) session(ctx context.Context, i int) {
	s := lg.w.Sessions[i]
	parent := ""
	if s.Parent >= 0 {
		parent = lg.w.Sessions[s.Parent].ID
	}
	turns := len(s.Turns)
	if lg.maxTurns > 0 {
		turns = min(turns, lg.maxTurns)
	}
	walk := trace.NewWalk(s, 0, turns)
	ended := make(chan struct{})
	// gap is the pending tool gap, nil when none; cancel is ctx.Done()
	// while one is pending: a cancelled run cuts the gap short but still
	// waits for the sub-agents (they stop at their next turn).
	var gap <-chan time.Time
	var cancel <-chan struct{}
	nx := walk.Start()
	for {
		for _, c := range nx.Start {
			go func() {
				lg.session(ctx, c)
				ended <- struct{}{}
			}()
		}
		switch nx.Do {
		case trace.EndSession:
			return
		case trace.SendTurn:
			// The walk sends a turn only once the sub-agents it waited for
			// have ended: returning here leaves none running.
			if ctx.Err() != nil || !lg.take() {
				return
			}
			lg.turn(ctx, s.ID, parent, &s.Turns[nx.Turn], nx.Turn == turns-1)
			nx = walk.TurnDone()
			continue
		case trace.WaitGap:
			// The first turn goes at once: its gap is the session's start
			// offset, which the closed loop (or --timed) replaces.
			if nx.Turn == 0 || lg.gapScale <= 0 {
				nx = walk.GapDone()
				continue
			}
			gap, cancel = time.After(time.Duration(float64(s.Turns[nx.Turn].Gap)*lg.gapScale)), ctx.Done()
		}
		select {
		case <-gap:
			gap, cancel = nil, nil
			nx = walk.GapDone()
		case <-cancel:
			gap, cancel = nil, nil
			nx = walk.GapDone()
		case <-ended:
			nx = walk.ChildDone()
		}
	}
}

func (lg *loadgen) take() bool {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if lg.budget <= 0 {
		return false
	}
	lg.budget--
	return true
}

// prompt renders a turn as words: each trace block becomes words derived
// from its id, so equal block ids are equal text.
func (lg *loadgen) prompt(t *trace.Turn) string {
	per := max(int(float64(lg.w.BlockSize)*lg.tokenScale), 1)
	var b strings.Builder
	for _, id := range t.Blocks {
		x := id*0x9e3779b97f4a7c15 + 1
		for range per {
			x ^= x >> 31
			x *= 0xbf58476d1ce4e5b9
			b.WriteString(words[x%uint64(len(words))])
			b.WriteByte(' ')
		}
	}
	if b.Len() == 0 {
		b.WriteString("hello")
	}
	return b.String()
}

var words = strings.Fields(`the of and to in is for on with as by at from this that be are it or an was
file code test build run error value function return type data list map table index cache block token
session agent tool call result change line path read write open close start stop check update merge`)

// headerID is a trace's session id as a session header carries it: the id
// itself where the frontend takes it, else a digest of it. A recorded
// trace's ids are scoped by tenant ("tenant/session"), which can pass the
// header's 256 bytes; a digest keeps equal ids equal and the sessions
// apart.
func headerID(id string) string {
	if agentctx.ValidateID(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "trace-" + hex.EncodeToString(sum[:16])
}

// turn sends one turn; final marks the session's last (x-dynamo-session-final),
// so that admission control releases its program instead of holding it until
// its idle TTL.
func (lg *loadgen) turn(ctx context.Context, session, parent string, t *trace.Turn, final bool) {
	body := map[string]any{
		"model":          lg.model,
		"messages":       []map[string]string{{"role": "user", "content": lg.prompt(t)}},
		"max_tokens":     max(int(float64(t.OutputLen)*lg.tokenScale), 1),
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, lg.url+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		lg.fail(ctx, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-dynamo-session-id", headerID(session))
	if parent != "" {
		req.Header.Set("x-dynamo-parent-session-id", headerID(parent))
	}
	if final {
		req.Header.Set(agentctx.HeaderSessionFinal, "true")
	}
	sent := time.Now()
	resp, err := lg.client.Do(req)
	if err != nil {
		lg.fail(ctx, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		lg.fail(ctx, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg)))
		return
	}
	var first, last time.Time
	chunks := 0
	var usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		data := bytes.TrimSpace(line[5:])
		if string(data) == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(data, &chunk) != nil {
			continue
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
			chunks++
		}
		if chunk.Usage != nil {
			_ = json.Unmarshal(*chunk.Usage, &usage)
		}
	}
	if err := sc.Err(); err != nil {
		lg.fail(ctx, err)
		return
	}
	lg.mu.Lock()
	defer lg.mu.Unlock()
	lg.requests++
	if !first.IsZero() {
		lg.ttft = append(lg.ttft, float64(first.Sub(sent))/1e6)
		if chunks > 1 {
			lg.itl = append(lg.itl, float64(last.Sub(first))/1e6/float64(chunks-1))
		}
	}
	lg.promptTokens += usage.PromptTokens
	lg.outTokens += usage.CompletionTokens
	if usage.PromptTokensDetails != nil {
		lg.cachedTokens += usage.PromptTokensDetails.CachedTokens
	}
}

// fail counts a request that failed: cut off when the run's ctx ended,
// else an error.
func (lg *loadgen) fail(ctx context.Context, err error) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if ctx.Err() != nil {
		lg.cut++
		return
	}
	lg.errs++
	if lg.firstErr == nil {
		lg.firstErr = err
		fmt.Fprintln(os.Stderr, "loadgen: first error:", err)
	}
}

func (lg *loadgen) report(w io.Writer, elapsed time.Duration) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	s := elapsed.Seconds()
	hit := 0.0
	if lg.promptTokens > 0 {
		hit = float64(lg.cachedTokens) / float64(lg.promptTokens)
	}
	fmt.Fprintf(w, "requests %d (errors %d, cut off by the run's end %d) in %.1fs\n", lg.requests, lg.errs, lg.cut, s)
	fmt.Fprintf(w, "TTFT ms p50 %s p99 %s   ITL ms p50 %s p99 %s\n",
		pct(lg.ttft, 0.5, 1), pct(lg.ttft, 0.99, 1), pct(lg.itl, 0.5, 2), pct(lg.itl, 0.99, 2))
	fmt.Fprintf(w, "throughput %.0f tokens/s (prompt %.0f, output %.0f)   cached tokens %d (%.1f%% of prompt)\n",
		float64(lg.promptTokens+lg.outTokens)/s, float64(lg.promptTokens)/s, float64(lg.outTokens)/s, lg.cachedTokens, 100*hit)
}

// pct is the q quantile of xs with prec decimals; "n/a" without samples
// (every request failed; or, for ITL, every answer one chunk).
func pct(xs []float64, q float64, prec int) string {
	if len(xs) == 0 {
		return "n/a"
	}
	ys := append([]float64(nil), xs...)
	slices.Sort(ys)
	i := int(q*float64(len(ys))+0.5) - 1
	return strconv.FormatFloat(ys[min(max(i, 0), len(ys)-1)], 'f', prec, 64)
}
