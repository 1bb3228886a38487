package adapter

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"switchyard.dev/pkg/engineevents"
	"switchyard.dev/pkg/kvhash"
)

// Engine names the engine kind behind the shim.
type Engine string

const (
	VLLM   Engine = "vllm"
	SGLang Engine = "sglang"
)

// Config configures a Backend.
type Config struct {
	Engine   Engine
	WorkerID string
	// Model is sent as the OpenAI "model" field (vLLM); empty lets the
	// engine use its only model.
	Model string
	// URL is the engine's HTTP server, e.g. http://127.0.0.1:8000.
	URL string
	// EventsEndpoint is the engine's KV event publisher for DP rank 0
	// (tcp://host:port); rank r listens on port+r. A "*" host means the
	// engine connects to us (its endpoint had no wildcard) and we bind.
	// Empty disables KV events.
	EventsEndpoint string
	// ReplayEndpoint is the engine's ROUTER replay endpoint for rank 0
	// (port+r for rank r); empty means gaps always resynchronise.
	ReplayEndpoint string
	// Topic is the subscription prefix ("" = every topic).
	Topic string
	// DPSize is the number of data-parallel ranks publishing events.
	DPSize int
	// BlockSize is Switchyard's tokens per block; the engine's block size
	// must be a multiple or a divisor of it.
	BlockSize int
	// EngineBlockSize, GPUBlocks, HostBlocks, DiskBlocks and MaxNumSeqs
	// override what the engine reports (0 = from /metrics, where the engine
	// reports it).
	EngineBlockSize int
	GPUBlocks       int
	HostBlocks      int
	DiskBlocks      int
	MaxNumSeqs      int

	// VLLMRetention says the vLLM build accepts per-request
	// retention_directives (vLLM PR #38514, not in a release): only then
	// are retain and pin hints forwarded to vLLM.
	VLLMRetention bool
	// VLLMPriority says vLLM runs with --scheduling-policy priority: only
	// then is GenerateRequest.priority sent (vLLM refuses a non-zero
	// priority under its default FCFS policy).
	VLLMPriority bool
	// ResidentRetainPriority is the engine retention priority a request
	// with GenerateRequest.retention_seconds carries (admission's resident
	// programs), on the engine's scale; a retain hint for the session, when
	// there is one, takes its place.
	ResidentRetainPriority int

	// MetricsInterval is how often /metrics is scraped.
	MetricsInterval time.Duration
	// ReplayTimeout bounds one replay; ReplayIdle bounds the wait for each
	// replayed message.
	ReplayTimeout time.Duration
	ReplayIdle    time.Duration
	// IdleReconnect re-dials the publisher after this long without a
	// message, so a restarted engine is found again (the pure-Go ZMQ socket
	// does not reconnect by itself).
	IdleReconnect time.Duration
	// RetryWait is the back-off between failed connection attempts.
	RetryWait time.Duration

	// HTTPClient talks to the engine (nil = a client without timeouts:
	// streams last as long as generation).
	HTTPClient *http.Client `json:"-"`
}

// DefaultConfig returns the defaults: vLLM on its default ports.
func DefaultConfig() Config {
	return Config{
		Engine:          VLLM,
		WorkerID:        "worker-0",
		URL:             "http://127.0.0.1:8000",
		EventsEndpoint:  "tcp://127.0.0.1:5557",
		DPSize:          1,
		BlockSize:       kvhash.DefaultBlockSize,
		MetricsInterval: time.Second,
		ReplayTimeout:   2 * time.Minute, // llm-d router's bound
		ReplayIdle:      2 * time.Second,
		IdleReconnect:   30 * time.Second,
		RetryWait:       5 * time.Second,
		// Half the engines' scale (SGLang 0–99, vLLM 0–100), as the kvhint
		// emitter's retain hints: room above for explicit pins.
		ResidentRetainPriority: 50,
	}
}

// RegisterFlags registers the adapter's flags. The engine kind itself is the
// shim's --engine flag; block size and worker id come from the shim's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "engine-url", c.URL, "HTTP base URL of the vLLM/SGLang server beside the shim")
	fs.StringVar(&c.EventsEndpoint, "kv-events-endpoint", c.EventsEndpoint, `engine KV event publisher of DP rank 0 (rank r: port+r); "" disables KV events`)
	fs.StringVar(&c.ReplayEndpoint, "kv-replay-endpoint", c.ReplayEndpoint, `engine KV event replay (ROUTER) endpoint of DP rank 0; "" = resynchronise on gaps`)
	fs.StringVar(&c.Topic, "kv-events-topic", c.Topic, "KV event topic prefix to subscribe to")
	fs.IntVar(&c.DPSize, "engine-dp-size", c.DPSize, "data-parallel ranks publishing KV events")
	fs.IntVar(&c.EngineBlockSize, "engine-block-size", c.EngineBlockSize, "engine tokens per KV block (0 = from /metrics)")
	fs.IntVar(&c.GPUBlocks, "engine-gpu-blocks", c.GPUBlocks, "engine device KV blocks (0 = from /metrics)")
	fs.IntVar(&c.HostBlocks, "engine-host-blocks", c.HostBlocks, "engine host KV blocks (0 = from /metrics)")
	fs.IntVar(&c.MaxNumSeqs, "engine-max-num-seqs", c.MaxNumSeqs, "engine's most concurrent requests (0 = unknown)")
	fs.BoolVar(&c.VLLMRetention, "vllm-retention-directives", c.VLLMRetention, "the vLLM build accepts retention_directives (PR #38514): forward retain/pin hints")
	fs.BoolVar(&c.VLLMPriority, "vllm-priority-scheduling", c.VLLMPriority, "vLLM runs with --scheduling-policy priority: forward the scheduler's request priority")
	fs.IntVar(&c.ResidentRetainPriority, "resident-retain-priority", c.ResidentRetainPriority, "engine retention priority of requests the scheduler asks to retain (its --resident-retention); 0 or less = the default")
	fs.DurationVar(&c.MetricsInterval, "engine-metrics-interval", c.MetricsInterval, "how often the engine's /metrics is scraped")
}

func (c Config) validate() error {
	switch c.Engine {
	case VLLM, SGLang:
	default:
		return fmt.Errorf("adapter: unknown engine %q (want vllm or sglang)", c.Engine)
	}
	if c.WorkerID == "" {
		return errors.New("adapter: a worker id is required")
	}
	// url.Parse takes "localhost:8000" as scheme "localhost": refused here,
	// it would otherwise fail every request instead of the start.
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("adapter: bad engine URL %q (want http://host:port)", c.URL)
	}
	if c.DPSize < 1 {
		return fmt.Errorf("adapter: dp size %d < 1", c.DPSize)
	}
	if c.EngineBlockSize > 0 {
		if err := engineevents.CheckBlockSize(c.EngineBlockSize, c.BlockSize); err != nil {
			return fmt.Errorf("adapter: %w", err)
		}
	}
	for _, ep := range []string{c.EventsEndpoint, c.ReplayEndpoint} {
		if ep == "" {
			continue
		}
		if _, err := RankEndpoint(ep, c.DPSize-1); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.BlockSize <= 0 {
		c.BlockSize = d.BlockSize
	}
	if c.DPSize <= 0 {
		c.DPSize = 1
	}
	if c.MetricsInterval <= 0 {
		c.MetricsInterval = d.MetricsInterval
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = d.ReplayTimeout
	}
	if c.ReplayIdle <= 0 {
		c.ReplayIdle = d.ReplayIdle
	}
	if c.IdleReconnect <= 0 {
		c.IdleReconnect = d.IdleReconnect
	}
	if c.RetryWait <= 0 {
		c.RetryWait = d.RetryWait
	}
	if c.ResidentRetainPriority <= 0 {
		c.ResidentRetainPriority = d.ResidentRetainPriority
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	c.URL = strings.TrimRight(c.URL, "/")
	return c
}

// RankEndpoint is the endpoint of DP rank r: the port offset by r, as vLLM
// and SGLang offset their publishers (ipc/inproc endpoints get "_dp<r>").
func RankEndpoint(endpoint string, rank int) (string, error) {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok || rest == "" {
		return "", fmt.Errorf("adapter: endpoint %q is not scheme://address", endpoint)
	}
	if scheme != "tcp" {
		if rank == 0 {
			return endpoint, nil
		}
		return fmt.Sprintf("%s_dp%d", endpoint, rank), nil
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("adapter: endpoint %q: %w", endpoint, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p+rank > 65535 {
		return "", fmt.Errorf("adapter: endpoint %q: bad port for rank %d", endpoint, rank)
	}
	if rank == 0 {
		return endpoint, nil
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(p+rank)), nil
}
