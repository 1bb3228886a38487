package kvhintemitter

import (
	"math"
	"time"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/kvwire"
)

// programFromProto decodes the scheduler's program into admission
// control's terms (the scheduler encodes them), which the policies observe
// through hints.ProgramOf, as the replay does.
func programFromProto(p *schedulerv1.Program) hints.Program {
	ap := admission.Program{Key: admission.Key{Tenant: p.GetTenant(), SessionID: p.GetSessionId()}, ParentSessionID: p.GetParentSessionId(), Worker: p.GetWorkerId(),
		Phase: phases[p.GetPhase()], Lifecycle: lifecycles[p.GetLifecycle()]}
	if p.GetPhaseSince() != nil {
		ap.PhaseSince = p.GetPhaseSince().AsTime()
	}
	return hints.ProgramOf(ap)
}

var phases = map[schedulerv1.ProgramPhase]admission.Phase{
	schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING: admission.Reasoning,
	schedulerv1.ProgramPhase_PROGRAM_PHASE_ACTING:    admission.Acting,
}

var lifecycles = map[schedulerv1.ProgramLifecycle]admission.Lifecycle{
	schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_ACTIVE:     admission.Active,
	schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED:     admission.Paused,
	schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_TERMINATED: admission.Terminated,
}

func span(b []kv.BlockHash) *kvv1.BlockSpan {
	return &kvv1.BlockSpan{BlockHashes: kvwire.Uint64s(b)}
}

func actionToProto(id string, a hints.Action) *kvv1.KvHintAction {
	out := &kvv1.KvHintAction{ActionId: id, ActionType: a.Kind.ActionType()}
	switch a.Kind {
	case hints.KindShare:
		out.Payload = &kvv1.KvHintAction_Share{Share: &kvv1.ShareHint{SessionId: a.Session, Blocks: span(a.Blocks), SourceWorkerId: a.SourceWorker, SourceTier: kvwire.TierToProto(a.SourceTier)}}
	case hints.KindPrefetch:
		out.Payload = &kvv1.KvHintAction_Prefetch{Prefetch: &kvv1.PrefetchHint{SessionId: a.Session, Blocks: span(a.Blocks), ToTier: kvwire.TierToProto(a.ToTier)}}
	case hints.KindDemote:
		out.Payload = &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{SessionId: a.Session, Blocks: span(a.Blocks), ToTier: kvwire.TierToProto(a.ToTier)}}
	case hints.KindRetain:
		out.Payload = &kvv1.KvHintAction_Retain{Retain: &kvv1.RetainHint{SessionId: a.Session, Blocks: span(a.Blocks), Priority: int32(min(max(a.Priority, 0), 100)), TtlSeconds: seconds(a.TTL)}}
	case hints.KindRelease:
		out.Payload = &kvv1.KvHintAction_ReleaseSession{ReleaseSession: &kvv1.ReleaseSessionHint{SessionId: a.Session}}
	}
	return out
}

// seconds rounds a lease up to whole seconds (a lease never shrinks to 0).
func seconds(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min((d+time.Second-1)/time.Second, math.MaxUint32))
}

var results = map[kvv1.HintResult]hints.Result{
	kvv1.HintResult_HINT_RESULT_ACCEPTED: hints.ResultAccepted,
	kvv1.HintResult_HINT_RESULT_CLIPPED:  hints.ResultClipped,
	kvv1.HintResult_HINT_RESULT_DEFERRED: hints.ResultDeferred,
}

func resultFromProto(r kvv1.HintResult) hints.Result {
	if res, ok := results[r]; ok {
		return res
	}
	// Rejected, or unspecified (an engine that did not say): not done.
	return hints.ResultRejected
}
