package frontend

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/trace"
	"switchyard.dev/services/servicekit/tracefile"
)

// traceConfig is where request-trace records go: SWITCHYARD_REQUEST_TRACE*
// (or Dynamo's DYN_REQUEST_TRACE*) from the environment, or --trace-file,
// which writes JSON lines to exactly that file, never rolled.
func traceConfig(cfg Config) (trace.SinkConfig, error) {
	c, err := trace.SinkConfigFromEnv(os.Getenv)
	if err != nil {
		return c, err
	}
	if cfg.TraceFile != "" {
		c.Enabled = true
		c.Sinks = []string{"file"}
		c.FilePath = cfg.TraceFile
		c.FileFormat = "jsonl"
		c.RollBytes, c.RollLines = 0, 0 // one file, at exactly that path
	}
	return c, nil
}

// openTraces opens the configured sinks behind a bounded queue (nil when
// tracing is off). Records are written by Run's goroutine, so a slow disk
// never holds a request; its failures go to log. A file that cannot be
// written at all stops the frontend here: the sink opens it only at its
// first flush, and would drop every record.
func openTraces(cfg Config, log logger) (*tracefile.Async, time.Duration, error) {
	c, err := traceConfig(cfg)
	if err != nil || !c.Enabled {
		return nil, 0, err
	}
	if slices.Contains(c.Sinks, "file") {
		// The sink's first file: a numbered one is created fresh, the
		// literal path appended to.
		first := trace.NewFileSink(c, time.Time{}, nil).Path(0)
		if err := tracefile.Writable(first, first != c.FilePath); err != nil {
			if cfg.TraceFile != "" {
				return nil, 0, fmt.Errorf("frontend: --trace-file %s: %w", cfg.TraceFile, err)
			}
			return nil, 0, fmt.Errorf("frontend: request-trace files %s (SWITCHYARD_REQUEST_TRACE_FILE_PATH): %w", c.FilePath, err)
		}
	}
	sink, err := trace.OpenSinks(c, os.Stderr, time.Now(), tracefile.Open)
	if err != nil {
		return nil, 0, err
	}
	return tracefile.NewAsync(sink, c.Capacity, log), c.FlushInterval, nil
}

// runTraces writes queued records until ctx ends, then drains and closes.
func (s *Service) runTraces(ctx context.Context) error {
	if s.traces == nil {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(s.traceFlush)
	defer tick.Stop()
	return s.traces.Run(ctx, tick.C)
}

func msSince(t time.Time, now time.Time) float64 { return float64(now.Sub(t).Microseconds()) / 1000 }

// trace records a finished (or failed) turn, if tracing is on. It holds no
// prompt or response content: counts, timings, the full blocks' hashes and
// tool names only (docs/security.md says what the hashes still give away).
func (s *Service) trace(tr *turnRequest, tk chat.Tokenized, res *turnResult, backend enginev1.FinishReason, firstAt time.Time) {
	if s.traces == nil {
		return
	}
	now := time.Now()
	m := &trace.RequestMetrics{
		RequestID:         tr.requestID,
		XRequestID:        tr.xRequestID,
		Model:             tr.model,
		InputTokens:       trace.U64(uint64(res.promptTokens)),
		OutputTokens:      trace.U64(uint64(res.completion)),
		CachedTokens:      trace.U64(uint64(res.cached)),
		RequestReceivedMs: trace.U64(uint64(tr.start.UnixMilli())),
		TotalTimeMs:       trace.F64(msSince(tr.start, now)),
		Worker:            &trace.WorkerInfo{WorkerName: res.workerID},
		Replay:            &trace.Replay{TraceBlockSize: s.cfg.BlockSize, InputLength: len(tk.Tokens), InputSequenceHashes: trace.SequenceHashes(tk.Hashes)},
		FinishReasonMetadata: &trace.FinishReasonMetadata{
			FinishReason: res.finish, BackendFinishReason: backend.String(), ToolCalls: []trace.ToolCall{},
		},
	}
	if backend == enginev1.FinishReason_FINISH_REASON_ABORT {
		m.FinishReasonMetadata.FinishReason = "abort"
	}
	if res.promptTokens > 0 {
		m.KVHitRate = trace.F64(float64(res.cached) / float64(res.promptTokens))
	}
	if !firstAt.IsZero() {
		m.TTFTMs = trace.F64(msSince(tr.start, firstAt))
		if res.completion > 1 {
			m.AvgITLMs = trace.F64(msSince(firstAt, now) / float64(res.completion-1))
		}
	}
	for _, mg := range res.migrations {
		m.Migrations = append(m.Migrations, trace.Migration{FromWorker: mg.fromWorker, Reason: mg.reason, AfterTokens: mg.afterTokens})
	}
	for i, tc := range res.toolCalls {
		m.FinishReasonMetadata.ToolCalls = append(m.FinishReasonMetadata.ToolCalls, trace.ToolCall{ToolCallIndex: uint32(i), ID: tc.ID, Name: tc.Name})
	}
	rec := &trace.Record{Schema: trace.Schema, EventType: trace.EventRequestEnd, EventTimeUnixMs: uint64(now.UnixMilli()), EventSource: "switchyard", Request: m}
	if tr.agent.HasSession() {
		tenant := tr.tenant
		if tenant == AnonymousTenant {
			tenant = ""
		}
		rec.AgentContext = &trace.AgentContext{
			Tenant: tenant, SessionID: tr.agent.SessionID, ParentSessionID: tr.agent.ParentSessionID,
			SessionFinal: tr.agent.SessionFinal != nil && *tr.agent.SessionFinal,
			InputTrigger: string(tr.agent.InputTrigger), Compaction: tr.agent.Compaction != nil,
		}
	}
	s.traces.Emit(rec)
}
