package frontend

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/services/servicekit"
)

// Config configures the frontend.
type Config struct {
	// SchedulerAddr lists the scheduler replicas' gRPC addresses,
	// comma-separated; every frontend must be given the same list (a
	// session's owner is computed from it: schedulers.go).
	SchedulerAddr string
	// KVHintEmitterAddr is the hint emitter's gRPC address, for the
	// console's hints (what was sent, and what the engines did with it);
	// empty: the console shows none.
	KVHintEmitterAddr string
	// BlockSize is the KV block size prompts are hashed with; it must match
	// the workers'.
	BlockSize int
	// Model is the served model name (/v1/models, responses' "model").
	// A request naming another model (not one of ModelAliases) is answered
	// 404, as OpenAI and Anthropic answer an unknown model; a request that
	// names none, or "", is served by Model (loadgen and the README's curl
	// examples rely on that).
	Model string
	// ModelAliases are other names requests may give Model: harnesses send
	// their own model names (Claude Code "claude-opus-4-…", Codex
	// "gpt-5-codex"), so pointing one at the mesh means listing its names
	// here (or configuring the harness with Model). /v1/models lists them
	// after Model.
	ModelAliases []string
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// BodyReadTimeout bounds how long a request's body takes to arrive once
	// its handler starts (negative: no bound).
	BodyReadTimeout time.Duration
	// MaxContextTokens bounds prompt + requested output tokens.
	MaxContextTokens int
	// DefaultMaxTokens is the output cap when the client sets none; 0: what
	// the context window leaves after the prompt, as OpenAI's APIs and vLLM
	// do (a fixed cap cut agents' long answers short: Codex sends none).
	DefaultMaxTokens int
	// MaxSessions bounds the sessions remembered for incremental decoding
	// and preprocessing, least recently used evicted first.
	MaxSessions int
	// RouteTimeout bounds the wait in Route (admission may hold a turn).
	RouteTimeout time.Duration
	// RouteRetryBudget bounds how long one request asks Route again while
	// the scheduler answers UNAVAILABLE (restarting, or no worker live),
	// backing off from 50 ms to 1 s; then the client gets a 503 with
	// Retry-After. Negative: never ask again.
	RouteRetryBudget time.Duration
	// MigrationLimit is how many times one turn moves to another worker
	// when its worker fails (before the first token the client never sees
	// the failed attempt; after it the next worker continues the answer).
	// Negative: never; at most maxMigrations.
	MigrationLimit int
	// StreamIdleTimeout bounds a worker's silence within a turn: the wait
	// for its first message and between two messages. Past it the attempt
	// counts as the worker failing (migration reason "stalled").
	StreamIdleTimeout time.Duration
	// MaxInflight bounds the generation requests (chat completions,
	// responses, messages) this frontend serves at once; past it a request
	// gets a 503 with Retry-After at once instead of queueing.
	MaxInflight int
	// APIKeys maps API keys to tenants (OperatorTenant: an operator's key,
	// admin API only); without tenant keys every request belongs to
	// AnonymousTenant. Kept only as SHA-256 digests once New has run.
	APIKeys map[string]string
	// APIKeysFile, if set, is read at New: "<sha256 hex of the key>
	// <tenant>" lines (keys.go).
	APIKeysFile string
	// TenantRPS bounds each tenant's requests per second (a bucket of as
	// many, refilled continuously); TenantStreams its generations at once.
	// Past either the client gets a 429 with Retry-After. 0: no bound.
	TenantRPS     float64
	TenantStreams int
	// KeepBillingHeader keeps Claude Code's per-request
	// "x-anthropic-billing-header" system block in the prompt. By default it
	// is stripped before templating: its suffix changes on every request,
	// so with it every turn would miss the prefix cache.
	KeepBillingHeader bool
	// ServerTiming adds Server-Timing to every answer: a header when it is
	// not streamed, a trailer when it is (serverTiming says what it holds).
	// Off by default: it tells a client how long admission held its turn,
	// which is the fleet's load.
	ServerTiming bool
	// SimToolCalls asks simulated engines to end answers to user messages
	// with a call of the request's first tool, so agent-shaped traffic
	// (tool call, tool result, answer) flows without a real model.
	SimToolCalls bool
	// TraceFile, if set, receives one request-trace record (JSON line,
	// dynamo.request.trace.v1) per request: content-free, keyed by session.
	TraceFile string
	// ChatTemplate, if set, is the model's own chat template: a .jinja file,
	// or a tokenizer_config.json whose chat_template is used, or "qwen3" for
	// the real Qwen3 template embedded with the default tokenizer. Empty
	// means the built-in ChatML/Hermes template (see pkg/chat's doc for why
	// it is the default).
	ChatTemplate string
}

// AnonymousTenant owns every request in anonymous mode.
const AnonymousTenant = "anonymous"

// DefaultConfig is the one place defaults live.
func DefaultConfig() Config {
	return Config{
		SchedulerAddr: "127.0.0.1:9100",
		BlockSize:     kvhash.DefaultBlockSize,
		Model:         "switchyard-sim",
		MaxBodyBytes:  32 << 20,
		// A 32 MiB body at 1 MB/s, with room to spare.
		BodyReadTimeout:  time.Minute,
		MaxContextTokens: 262144,
		MaxSessions:      4096,
		RouteTimeout:     5 * time.Minute,
		RouteRetryBudget: 5 * time.Second,
		MigrationLimit:   3,
		// Long enough for a 100k-token prefill behind a busy batch, short
		// enough that a wedged engine does not hold a client for good.
		StreamIdleTimeout: 2 * time.Minute,
		MaxInflight:       2048,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SchedulerAddr == "" {
		c.SchedulerAddr = d.SchedulerAddr
	}
	if c.BlockSize <= 0 {
		c.BlockSize = d.BlockSize
	}
	if c.Model == "" {
		c.Model = d.Model
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.BodyReadTimeout == 0 {
		c.BodyReadTimeout = d.BodyReadTimeout
	}
	if c.MaxContextTokens <= 0 {
		c.MaxContextTokens = d.MaxContextTokens
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.RouteTimeout <= 0 {
		c.RouteTimeout = d.RouteTimeout
	}
	if c.RouteRetryBudget == 0 {
		c.RouteRetryBudget = d.RouteRetryBudget
	}
	if c.MigrationLimit == 0 {
		c.MigrationLimit = d.MigrationLimit
	}
	if c.StreamIdleTimeout <= 0 {
		c.StreamIdleTimeout = d.StreamIdleTimeout
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = d.MaxInflight
	}
	return c
}

// maxMigrations bounds MigrationLimit: every move adds the failed worker to
// the route's exclude_workers, of which the scheduler takes at most 256.
const maxMigrations = 256

// RegisterFlags registers the frontend's flags with c's values as defaults
// (servicekit.EnvFlags then maps each to SWITCHYARD_<NAME>).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.KVHintEmitterAddr, "kvhint-emitter-addr", c.KVHintEmitterAddr, "kvhint-emitter gRPC address, for the console's hints (empty: none shown)")
	fs.StringVar(&c.SchedulerAddr, "scheduler-addr", c.SchedulerAddr, "scheduler replicas' gRPC addresses, comma-separated, the same list on every frontend: a session's turns go to its owner among them, or the next while it is down")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "KV block size in tokens (must match the workers)")
	fs.StringVar(&c.Model, "model", c.Model, "served model name")
	fs.Func("model-aliases", "comma-separated other names requests may give the served model (e.g. a harness's own model names); any other model is a 404", func(s string) error {
		for _, name := range strings.Split(s, ",") {
			if name = strings.TrimSpace(name); name != "" {
				c.ModelAliases = append(c.ModelAliases, name)
			}
		}
		return nil
	})
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted request body")
	fs.DurationVar(&c.BodyReadTimeout, "body-read-timeout", c.BodyReadTimeout, "longest a request's body may take to arrive, then a 408 that frees its in-flight slot (0 = the default; negative = no bound)")
	fs.IntVar(&c.MaxContextTokens, "max-context-tokens", c.MaxContextTokens, "largest prompt + output, in tokens")
	fs.IntVar(&c.DefaultMaxTokens, "default-max-tokens", c.DefaultMaxTokens, "output cap when the client sets none (unset: what the context window leaves after the prompt, as OpenAI and vLLM)")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "sessions remembered for incremental decoding and preprocessing (each keeps its previous request body and prompt tokens)")
	fs.DurationVar(&c.RouteTimeout, "route-timeout", c.RouteTimeout, "longest wait for the scheduler to admit a turn")
	fs.DurationVar(&c.RouteRetryBudget, "route-retry-budget", c.RouteRetryBudget, "how long a request retries Route while the scheduler is unavailable, then a 503 with Retry-After (negative = no retry; 0 = the default)")
	fs.IntVar(&c.MigrationLimit, "migration-limit", c.MigrationLimit, "times a turn moves to another worker when its worker fails, before or after the first token, at most 256 (negative = never; 0 = the default)")
	fs.DurationVar(&c.StreamIdleTimeout, "stream-idle-timeout", c.StreamIdleTimeout, "longest silence of a worker within a turn (before its first message or between two); past it the worker counts as failed and the turn migrates")
	fs.IntVar(&c.MaxInflight, "max-inflight-requests", c.MaxInflight, "requests that read a body (generations and token counts) served at once; past it a 503 with Retry-After")
	fs.StringVar(&c.APIKeysFile, "api-keys-file", c.APIKeysFile, `file of "<sha256 hex of the key> <tenant>" lines (tenant "*": an operator's key, admin API only); no tenant keys = anonymous mode`)
	fs.Float64Var(&c.TenantRPS, "tenant-rps", c.TenantRPS, "requests per second per tenant (generations and token counts), then 429 with Retry-After (0 = no bound)")
	fs.IntVar(&c.TenantStreams, "tenant-streams", c.TenantStreams, "generations at once per tenant, then 429 with Retry-After (0 = no bound)")
	fs.Func("api-keys", `comma-separated key:tenant pairs, the keys in plain text (development; adds to --api-keys-file)`, func(s string) error {
		keys, err := parseKeyPairs(s)
		if err != nil {
			return err
		}
		if c.APIKeys == nil {
			c.APIKeys = map[string]string{}
		}
		for k, t := range keys {
			if prev, dup := c.APIKeys[k]; dup && prev != t {
				return fmt.Errorf("a key given as %s's and as %s's; one key names one tenant", prev, t)
			}
			c.APIKeys[k] = t
		}
		return nil
	})
	fs.BoolVar(&c.KeepBillingHeader, "keep-billing-header", c.KeepBillingHeader, "keep Claude Code's x-anthropic-billing-header system block (stripped by default: it defeats prefix caching)")
	fs.StringVar(&c.ChatTemplate, "chat-template", c.ChatTemplate, "model chat template: a .jinja file, a tokenizer_config.json, or \"qwen3\" for the embedded Qwen3 template (default: built-in ChatML)")
	fs.StringVar(&c.TraceFile, "trace-file", c.TraceFile, "write request-trace records (dynamo.request.trace.v1 JSON lines) to this file, which must be writable at start; SWITCHYARD_REQUEST_TRACE* configure rolling and gzip files instead")
	fs.BoolVar(&c.SimToolCalls, "sim-tool-calls", c.SimToolCalls, "make simulated engines answer user messages with a call of the first tool")
	fs.BoolVar(&c.ServerTiming, "server-timing", c.ServerTiming, "add Server-Timing to answers (a header; a trailer when streamed): the route decision's time (admission's wait included), the engine's own and the frontend's total until the end of the answer is written")
	// Values withDefaults would replace without a word: 0 has no meaning
	// of its own for these (Go callers, switchyard up, leave fields 0 for
	// the defaults; only the command line and the environment are held to
	// this).
	positive := func(v float64) bool { return v > 0 }
	for _, name := range []string{"block-size", "max-body-bytes", "max-context-tokens", "max-sessions",
		"route-timeout", "stream-idle-timeout", "max-inflight-requests"} {
		servicekit.Bound(fs, name, "> 0", positive)
	}
	// 0 has a meaning of its own for these: no limit, no cap.
	for _, name := range []string{"tenant-rps", "tenant-streams", "default-max-tokens"} {
		servicekit.Bound(fs, name, "≥ 0", func(v float64) bool { return v >= 0 })
	}
}

func parseKeyPairs(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, t, ok := strings.Cut(pair, ":")
		if !ok || k == "" || t == "" {
			return nil, fmt.Errorf("api key pair %q: want key:tenant", pair)
		}
		if t != OperatorTenant {
			if err := validTenant(t); err != nil {
				return nil, err
			}
		}
		if prev, dup := out[k]; dup && prev != t {
			return nil, fmt.Errorf("api key pair %q: the key is already %s's; one key names one tenant", pair, prev)
		}
		out[k] = t
	}
	return out, nil
}

// validTenant keeps tenant names usable as session-key scopes and labels.
func validTenant(t string) error {
	if t == "" || len(t) > 128 {
		return fmt.Errorf("tenant %q: 1 to 128 characters", t)
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("tenant %q: only letters, digits, '-', '_' and '.'", t)
		}
	}
	return nil
}
