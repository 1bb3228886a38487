package engineshim

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit/kvwire"
)

var finishToProto = map[enginesim.FinishReason]enginev1.FinishReason{
	enginesim.FinishStop:      enginev1.FinishReason_FINISH_REASON_STOP,
	enginesim.FinishLength:    enginev1.FinishReason_FINISH_REASON_LENGTH,
	enginesim.FinishToolCalls: enginev1.FinishReason_FINISH_REASON_TOOL_CALLS,
}

var hintStatusToProto = map[enginesim.HintStatus]kvv1.HintResult{
	enginesim.HintAccepted: kvv1.HintResult_HINT_RESULT_ACCEPTED,
	enginesim.HintClipped:  kvv1.HintResult_HINT_RESULT_CLIPPED,
	enginesim.HintDeferred: kvv1.HintResult_HINT_RESULT_DEFERRED,
	enginesim.HintRejected: kvv1.HintResult_HINT_RESULT_REJECTED,
}

// hintFromProto maps one wire action to an engine hint; ok is false (with a
// reason) for actions the simulated engine does not implement.
func hintFromProto(a *kvv1.KvHintAction) (h enginesim.Hint, reason string, ok bool) {
	switch p := a.GetPayload().(type) {
	case *kvv1.KvHintAction_Share:
		return enginesim.Hint{Action: enginesim.HintShare, SessionID: p.Share.GetSessionId(), Blocks: kvwire.Hashes(p.Share.GetBlocks().GetBlockHashes())}, "", true
	case *kvv1.KvHintAction_Prefetch:
		if t := p.Prefetch.GetToTier(); t != kvv1.Tier_TIER_UNSPECIFIED && t != kvv1.Tier_TIER_DEVICE {
			return h, "prefetch only targets the device tier", false
		}
		return enginesim.Hint{Action: enginesim.HintPrefetch, SessionID: p.Prefetch.GetSessionId(), Blocks: kvwire.Hashes(p.Prefetch.GetBlocks().GetBlockHashes())}, "", true
	case *kvv1.KvHintAction_Demote:
		// Demotion goes to the next tier down (host, or disk when there is
		// no host tier); the requested tier is advice.
		return enginesim.Hint{Action: enginesim.HintDemote, SessionID: p.Demote.GetSessionId(), Blocks: kvwire.Hashes(p.Demote.GetBlocks().GetBlockHashes())}, "", true
	case *kvv1.KvHintAction_ReleaseSession:
		return enginesim.Hint{Action: enginesim.HintReleaseSession, SessionID: p.ReleaseSession.GetSessionId()}, "", true
	case *kvv1.KvHintAction_Pin:
		return h, "pin is not supported by the simulated engine", false
	case *kvv1.KvHintAction_Retain:
		return h, "retain is not supported by the simulated engine", false
	case nil:
		return h, "empty action", false
	}
	return h, "unknown action type " + a.GetActionType(), false
}

func batchProto(workerID string, epoch, seq uint64, evs []kv.Event, at timestampFunc) *kvv1.KvEventBatch {
	return &kvv1.KvEventBatch{
		WorkerId: workerID,
		Epoch:    epoch,
		Sequence: seq,
		Events:   kvwire.EventsToProto(evs),
		Time:     at(),
	}
}

type timestampFunc func() *timestamppb.Timestamp
