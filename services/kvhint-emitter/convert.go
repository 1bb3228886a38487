package kvhintemitter

import (
	"math"
	"time"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/kvwire"
)

func programFromProto(p *schedulerv1.Program) hints.Program {
	out := hints.Program{Session: p.GetSessionId(), Parent: p.GetParentSessionId(), Worker: p.GetWorkerId()}
	switch p.GetPhase() {
	case schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING:
		out.Phase = hints.PhaseReasoning
	case schedulerv1.ProgramPhase_PROGRAM_PHASE_ACTING:
		out.Phase = hints.PhaseActing
	}
	switch p.GetLifecycle() {
	case schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_ACTIVE:
		out.Lifecycle = hints.LifecycleActive
	case schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED:
		out.Lifecycle = hints.LifecyclePaused
	case schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_TERMINATED:
		out.Lifecycle = hints.LifecycleTerminated
	}
	if p.GetPhaseSince() != nil {
		out.PhaseSince = p.GetPhaseSince().AsTime()
	}
	return out
}

// actionTypes names each typed action with its version on the wire.
var actionTypes = map[hints.Kind]string{
	hints.KindShare:    "kv.share@1",
	hints.KindPrefetch: "kv.prefetch@1",
	hints.KindDemote:   "kv.demote@1",
	hints.KindPin:      "kv.pin@1",
	hints.KindRetain:   "kv.retain@1",
	hints.KindRelease:  "kv.release_session@1",
}

func span(b []kv.BlockHash) *kvv1.BlockSpan {
	return &kvv1.BlockSpan{BlockHashes: kvwire.Uint64s(b)}
}

func actionToProto(id string, a hints.Action) *kvv1.KvHintAction {
	out := &kvv1.KvHintAction{ActionId: id, ActionType: actionTypes[a.Kind]}
	switch a.Kind {
	case hints.KindShare:
		out.Payload = &kvv1.KvHintAction_Share{Share: &kvv1.ShareHint{SessionId: a.Session, Blocks: span(a.Blocks), SourceWorkerId: a.SourceWorker, SourceTier: kvwire.TierToProto(a.SourceTier)}}
	case hints.KindPrefetch:
		out.Payload = &kvv1.KvHintAction_Prefetch{Prefetch: &kvv1.PrefetchHint{SessionId: a.Session, Blocks: span(a.Blocks), ToTier: kvwire.TierToProto(a.ToTier)}}
	case hints.KindDemote:
		out.Payload = &kvv1.KvHintAction_Demote{Demote: &kvv1.DemoteHint{SessionId: a.Session, Blocks: span(a.Blocks), ToTier: kvwire.TierToProto(a.ToTier)}}
	case hints.KindPin:
		out.Payload = &kvv1.KvHintAction_Pin{Pin: &kvv1.PinHint{SessionId: a.Session, Blocks: span(a.Blocks), TtlSeconds: seconds(a.TTL)}}
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

func resultFromProto(r kvv1.HintResult) hints.Result {
	switch r {
	case kvv1.HintResult_HINT_RESULT_ACCEPTED:
		return hints.ResultAccepted
	case kvv1.HintResult_HINT_RESULT_CLIPPED:
		return hints.ResultClipped
	case kvv1.HintResult_HINT_RESULT_DEFERRED:
		return hints.ResultDeferred
	}
	// Unspecified is an engine that did not say: count it as not done.
	return hints.ResultRejected
}
