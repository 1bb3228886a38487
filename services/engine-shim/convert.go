package engineshim

import (
	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/services/servicekit/kvwire"
)

var finishToProto = map[enginesim.FinishReason]enginev1.FinishReason{
	enginesim.FinishStop:      enginev1.FinishReason_FINISH_REASON_STOP,
	enginesim.FinishLength:    enginev1.FinishReason_FINISH_REASON_LENGTH,
	enginesim.FinishToolCalls: enginev1.FinishReason_FINISH_REASON_TOOL_CALLS,
}

var resultToProto = map[hints.Result]kvv1.HintResult{
	hints.ResultAccepted: kvv1.HintResult_HINT_RESULT_ACCEPTED,
	hints.ResultClipped:  kvv1.HintResult_HINT_RESULT_CLIPPED,
	hints.ResultDeferred: kvv1.HintResult_HINT_RESULT_DEFERRED,
	hints.ResultRejected: kvv1.HintResult_HINT_RESULT_REJECTED,
}

// hintFromProto maps one wire action to an engine hint; ok is false (with a
// reason) for actions the simulated engine does not implement.
func hintFromProto(a *kvv1.KvHintAction) (h enginesim.Hint, reason string, ok bool) {
	switch p := a.GetPayload().(type) {
	case *kvv1.KvHintAction_Share:
		return enginesim.Hint{Kind: hints.KindShare, SessionID: p.Share.GetSessionId(), Blocks: kvwire.Hashes(p.Share.GetBlocks().GetBlockHashes())}, "", true
	case *kvv1.KvHintAction_Prefetch:
		if t := p.Prefetch.GetToTier(); t != kvv1.Tier_TIER_UNSPECIFIED && t != kvv1.Tier_TIER_DEVICE {
			return h, "prefetch only targets the device tier", false
		}
		return enginesim.Hint{Kind: hints.KindPrefetch, SessionID: p.Prefetch.GetSessionId(), Blocks: kvwire.Hashes(p.Prefetch.GetBlocks().GetBlockHashes())}, "", true
	case *kvv1.KvHintAction_Demote:
		// Demotion goes to the next tier down (host, or disk when there is
		// no host tier); the requested tier is advice.
		return enginesim.Hint{Kind: hints.KindDemote, SessionID: p.Demote.GetSessionId(), Blocks: kvwire.Hashes(p.Demote.GetBlocks().GetBlockHashes())}, "", true
	case *kvv1.KvHintAction_ReleaseSession:
		return enginesim.Hint{Kind: hints.KindRelease, SessionID: p.ReleaseSession.GetSessionId()}, "", true
	case *kvv1.KvHintAction_Pin:
		return h, "pin is not supported by the simulated engine", false
	case *kvv1.KvHintAction_Retain:
		return h, "retain is not supported by the simulated engine", false
	case nil:
		return h, "empty action", false
	}
	return h, "unknown action type " + a.GetActionType(), false
}
