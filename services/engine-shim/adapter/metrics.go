package adapter

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// sample is one Prometheus text-format sample.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text exposition format: enough of it for
// the engines' gauges, counters and info metrics (comments skipped, labels
// with escaped quotes, optional timestamps).
func parseMetrics(r io.Reader) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	var s sample
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("metrics: bad line %q", line)
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		s.labels = map[string]string{}
		j := 1
		for {
			for j < len(rest) && (rest[j] == ' ' || rest[j] == ',') {
				j++
			}
			if j >= len(rest) {
				return s, fmt.Errorf("metrics: unterminated labels in %q", line)
			}
			if rest[j] == '}' {
				j++
				break
			}
			eq := strings.IndexByte(rest[j:], '=')
			if eq < 0 || j+eq+1 >= len(rest) || rest[j+eq+1] != '"' {
				return s, fmt.Errorf("metrics: bad label in %q", line)
			}
			key := rest[j : j+eq]
			j += eq + 2
			var val strings.Builder
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
						continue
					}
				}
				val.WriteByte(rest[j])
			}
			if j >= len(rest) {
				return s, fmt.Errorf("metrics: unterminated label value in %q", line)
			}
			j++ // closing quote
			s.labels[key] = val.String()
		}
		rest = rest[j:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("metrics: no value in %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("metrics: bad value in %q", line)
	}
	s.value = v
	return s, nil
}

// scrape is what one /metrics read says about the engine.
type scrape struct {
	ok                 bool
	at                 time.Time
	running, waiting   float64
	usage              float64 // fraction of device KV in use
	hits, queries      float64 // prefix-cache tokens (vLLM counters)
	hitRate            float64 // SGLang's own gauge
	preemptions        float64
	engineBlockSize    int
	blockSizeAssumed   bool // engineBlockSize is SGLang's default, the engine said none
	gpuBlocks, cpuBlks int  // in engine blocks
	capacityTokens     float64
	maxRunning         int
}

// The names each engine exposes (older vLLM names second).
var metricNames = map[Engine]struct {
	running, waiting, preempt []string
	usage, hits, queries      []string
	hitRate, tokens, maxRun   []string
}{
	VLLM: {
		running: []string{"vllm:num_requests_running"},
		waiting: []string{"vllm:num_requests_waiting"},
		preempt: []string{"vllm:num_preemptions_total", "vllm:num_preemptions"},
		usage:   []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		hits:    []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"},
		queries: []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"},
	},
	SGLang: {
		running: []string{"sglang:num_running_reqs"},
		waiting: []string{"sglang:num_queue_reqs"},
		preempt: []string{"sglang:num_retracted_reqs_total", "sglang:num_retracted_reqs"},
		usage:   []string{"sglang:token_usage"},
		hitRate: []string{"sglang:cache_hit_rate"},
		tokens:  []string{"sglang:max_total_num_tokens"},
		maxRun:  []string{"sglang:max_running_requests"},
	},
}

// summarize reads the engine's samples. Gauges of several DP ranks (or
// label sets) add up; usage and hit rates average.
func summarize(e Engine, samples []sample) scrape {
	names := metricNames[e]
	sum := func(ns []string) (float64, bool) {
		for _, n := range ns {
			var v float64
			found := false
			for _, s := range samples {
				if s.name == n && !math.IsNaN(s.value) {
					v += s.value
					found = true
				}
			}
			if found {
				return v, true
			}
		}
		return 0, false
	}
	mean := func(ns []string) float64 {
		for _, n := range ns {
			var v float64
			k := 0
			for _, s := range samples {
				if s.name == n && !math.IsNaN(s.value) {
					v += s.value
					k++
				}
			}
			if k > 0 {
				return v / float64(k)
			}
		}
		return 0
	}
	var sc scrape
	sc.ok = true
	sc.running, _ = sum(names.running)
	sc.waiting, _ = sum(names.waiting)
	sc.preemptions, _ = sum(names.preempt)
	sc.usage = mean(names.usage)
	sc.hits, _ = sum(names.hits)
	sc.queries, _ = sum(names.queries)
	sc.hitRate = mean(names.hitRate)
	sc.capacityTokens, _ = sum(names.tokens)
	if v, ok := sum(names.maxRun); ok {
		sc.maxRunning = int(v)
	}
	for _, s := range samples {
		switch s.name {
		case "vllm:cache_config_info":
			// Info metric: the configuration is in the labels.
			sc.engineBlockSize = atoi(s.labels["block_size"])
			sc.gpuBlocks += atoi(s.labels["num_gpu_blocks"])
			sc.cpuBlks += atoi(s.labels["num_cpu_blocks"])
		case "sglang:page_size":
			// Tokens per page, one sample per DP rank, all alike: taken,
			// not added.
			if s.value >= 1 && s.value <= math.MaxInt32 {
				sc.engineBlockSize = int(s.value)
			}
		case "sglang:cache_config_info":
			// The same, as older SGLang releases report it.
			if ps := atoi(s.labels["page_size"]); ps > 0 {
				sc.engineBlockSize = ps
			}
		}
	}
	if e == SGLang && sc.engineBlockSize == 0 {
		// A release before both page-size metrics: its --page-size
		// defaults to 1 token, which the counts are read in, with a
		// warning (scrapeOnce).
		sc.engineBlockSize, sc.blockSizeAssumed = 1, true
	}
	return sc
}

func atoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f < 0 || f > math.MaxInt32 {
			return 0
		}
		return int(f)
	}
	return max(v, 0)
}

func (b *Backend) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(b.cfg.MetricsInterval)
	defer t.Stop()
	for {
		b.scrapeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *Backend) scrapeOnce(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(b.cfg.MetricsInterval, time.Second))
	defer cancel()
	// The engine's numbers are read while it answers: the scrape is taken as
	// sampled when it was asked for, the earliest it can be (a heartbeat
	// says how old its load is, and the scheduler keeps the turns that
	// finished since taken out of it).
	asked := time.Now()
	sc, err := b.fetchMetrics(rctx)
	b.stats.scrapes.Add(1)
	if err != nil {
		b.stats.scrapeErrors.Add(1)
		if ctx.Err() == nil {
			b.log.Debug("metrics scrape failed", "err", err)
		}
		return
	}
	sc.at = asked
	b.metricsMu.Lock()
	b.scraped = sc
	b.metricsMu.Unlock()
	// Block counts given on the command line are in the engine's blocks. An
	// engine that answers its metrics without its block size (vLLM registers
	// cache_config_info before it serves) will not give it later: the
	// operator should hear, once, that the counts are unused (vLLM) or read
	// in SGLang's default page of 1 token.
	if b.cfg.EngineBlockSize <= 0 && (b.cfg.GPUBlocks > 0 || b.cfg.HostBlocks > 0) &&
		(sc.engineBlockSize == 0 || sc.blockSizeAssumed) && !b.warnedBlockSize.Swap(true) {
		if sc.blockSizeAssumed {
			b.log.Warn("the engine reports no KV page size: --engine-gpu-blocks and --engine-host-blocks are read " +
				"in SGLang's default page of 1 token; set --engine-block-size if it runs with --page-size")
		} else {
			b.log.Warn("the engine reports no KV block size, so --engine-gpu-blocks and --engine-host-blocks are unused: " +
				"set --engine-block-size")
		}
	}
}

func (b *Backend) fetchMetrics(ctx context.Context) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.URL+"/metrics", nil)
	if err != nil {
		return scrape{}, err
	}
	resp, err := b.cfg.HTTPClient.Do(req)
	if err != nil {
		return scrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scrape{}, fmt.Errorf("metrics: HTTP %d", resp.StatusCode)
	}
	samples, err := parseMetrics(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return scrape{}, err
	}
	return summarize(b.cfg.Engine, samples), nil
}

// Capacity is the engine's KV capacity in Switchyard blocks: the flags when
// set, else what the engine reports (vLLM cache_config_info; SGLang's token
// capacity).
func (b *Backend) Capacity() *workerv1.WorkerCapacity {
	b.metricsMu.Lock()
	sc := b.scraped
	b.metricsMu.Unlock()
	ebs := b.cfg.EngineBlockSize
	if ebs <= 0 {
		ebs = sc.engineBlockSize
	}
	// Block counts are in engine blocks, which say nothing about tokens
	// until the engine's block size is known: an SGLang page holds 1 token
	// by default and 16 or 64 where --page-size says so, which its metrics
	// say (summarize). Until the first scrape the counts are unknown (0),
	// and SGLang's own token count stands for the device tier.
	tokens := func(flagBlocks, scraped int) uint64 {
		if flagBlocks > 0 {
			return uint64(flagBlocks) * uint64(ebs)
		}
		return uint64(scraped) * uint64(ebs)
	}
	gpu := tokens(b.cfg.GPUBlocks, sc.gpuBlocks)
	if gpu == 0 && sc.capacityTokens > 0 {
		gpu = uint64(sc.capacityTokens)
	}
	host := tokens(b.cfg.HostBlocks, sc.cpuBlks)
	disk := uint64(b.cfg.DiskBlocks) * uint64(ebs)
	bs := uint64(b.cfg.BlockSize)
	maxRun := b.cfg.MaxNumSeqs
	if maxRun == 0 {
		maxRun = sc.maxRunning
	}
	return &workerv1.WorkerCapacity{
		GpuBlocks:          uint32(gpu / bs),
		HostBlocks:         uint32(host / bs),
		DiskBlocks:         uint32(disk / bs),
		KvCapacityTokens:   gpu + host + disk,
		MaxRunningRequests: uint32(maxRun),
	}
}

// Load is the engine's load as last scraped (zero before the first scrape;
// ObservedAt says when).
func (b *Backend) Load() *workerv1.WorkerLoad {
	b.metricsMu.Lock()
	sc := b.scraped
	b.metricsMu.Unlock()
	total := b.Capacity().GetGpuBlocks()
	l := &workerv1.WorkerLoad{
		RunningRequests: uint32(sc.running),
		WaitingRequests: uint32(sc.waiting),
		TotalKvBlocks:   total,
		UsedKvBlocks:    uint32(math.Round(sc.usage * float64(total))),
		Preemptions:     uint64(sc.preemptions),
	}
	l.ActiveKvBlocks = l.UsedKvBlocks // engines report one usage figure
	switch {
	case sc.queries > 0:
		l.PrefixHitRate = sc.hits / sc.queries
	default:
		l.PrefixHitRate = sc.hitRate
	}
	if sc.ok {
		l.ObservedAt = timestamppb.New(sc.at)
	}
	return l
}
