package replay

import (
	"switchyard.dev/pkg/trace"
)

// Record turns a simulated turn into the request_end record the frontend
// would have written for it, on virtual time (epoch = 2026-01-01 UTC), so
// that simulated runs can be drawn (trace perfetto) or replayed again.
func Record(t TurnResult) trace.Record {
	base := uint64(epoch.UnixMilli())
	ms := func(d interface{ Milliseconds() int64 }) uint64 { return base + uint64(d.Milliseconds()) }
	sent := ms(t.Sent)
	ttft := float64(t.FirstToken-t.Sent) / 1e6
	total := float64(t.Done-t.Sent) / 1e6
	hashes := make([]uint64, len(t.Hashes))
	for i, h := range t.Hashes {
		hashes[i] = uint64(h)
	}
	q := &trace.RequestMetrics{
		RequestID:         t.RequestID,
		Model:             t.Model,
		InputTokens:       trace.U64(uint64(t.InputTokens)),
		OutputTokens:      trace.U64(uint64(t.OutputTokens)),
		CachedTokens:      trace.U64(uint64(t.CachedTokens)),
		RequestReceivedMs: trace.U64(sent),
		TTFTMs:            trace.F64(ttft),
		TotalTimeMs:       trace.F64(total),
		Worker:            &trace.WorkerInfo{WorkerName: t.Worker},
		Replay:            &trace.Replay{TraceBlockSize: t.BlockSize, InputLength: t.InputTokens, InputSequenceHashes: hashes},
	}
	if t.Queued > 0 {
		q.PrefillWaitTimeMs = trace.F64(float64(t.Queued) / 1e6)
		q.PrefillTimeMs = trace.F64(ttft - float64(t.Queued)/1e6)
	}
	if t.OutputTokens > 1 {
		q.AvgITLMs = trace.F64(float64(t.Done-t.FirstToken) / 1e6 / float64(t.OutputTokens-1))
	}
	if t.InputTokens > 0 {
		q.KVHitRate = trace.F64(float64(t.CachedTokens) / float64(t.InputTokens))
	}
	fm := &trace.FinishReasonMetadata{FinishReason: "stop", ToolCalls: []trace.ToolCall{}}
	if t.ToolCall {
		fm.FinishReason = "tool_calls"
		fm.ToolCalls = append(fm.ToolCalls, trace.ToolCall{Name: "tool"})
	}
	q.FinishReasonMetadata = fm
	return trace.Record{
		Schema:          trace.Schema,
		EventType:       trace.EventRequestEnd,
		EventTimeUnixMs: ms(t.Done),
		AgentContext:    &trace.AgentContext{SessionID: t.SessionID, ParentSessionID: t.ParentSessionID},
		Request:         q,
	}
}
