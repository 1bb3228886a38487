package adapter

import (
	"fmt"
	"sync"
	"time"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/hints"
)

// retention is what a session's next requests carry to the engine.
type retention struct {
	priority int       // engine scale: SGLang 0–99, vLLM 0–100
	ttl      uint32    // seconds; 0 = none
	expires  time.Time // zero = until released
}

// hintBook keeps the retention the hints asked for, per session. Neither
// engine offers an out-of-band call to change the retention of cached
// blocks; both take it per request, so it is attached to the session's
// following requests.
type hintBook struct {
	mu       sync.Mutex
	sessions map[string]retention
	sweepAt  int // book size at which expired entries are next swept
}

// minSweep is the smallest book that is swept.
const minSweep = 1024

// set records a session's retention. An expired entry is otherwise dropped
// only when its session sends another request, and most sessions end
// without one (or without a release: release_finished is a policy that may
// be off), so the book would grow by every session ever retained: expired
// entries are swept whenever it has doubled since the last sweep, which
// keeps it within twice the live sessions at amortised constant cost.
func (h *hintBook) set(session string, r retention, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sessions[session] = r
	if len(h.sessions) < h.sweepAt {
		return
	}
	for s, r := range h.sessions {
		if !r.expires.IsZero() && now.After(r.expires) {
			delete(h.sessions, s)
		}
	}
	h.sweepAt = max(2*len(h.sessions), minSweep)
}

func (h *hintBook) release(session string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.sessions[session]
	delete(h.sessions, session)
	return ok
}

// get returns the session's retention, dropping it once expired.
func (h *hintBook) get(session string, now time.Time) (retention, bool) {
	if session == "" {
		return retention{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.sessions[session]
	if ok && !r.expires.IsZero() && now.After(r.expires) {
		delete(h.sessions, session)
		return retention{}, false
	}
	return r, ok
}

// retentionOf is what a request carries to the engine: the retention a
// hint set for its session, else the one the scheduler asked for
// (retention_seconds, at ResidentRetainPriority). An engine that cannot
// take either (a vLLM release) gets none; a request whose retention is so
// dropped is counted (Stats.RetentionDropped) and the first one logged.
func (b *Backend) retentionOf(req *enginev1.GenerateRequest, session string, now time.Time) (retention, bool) {
	ret, ok := b.hints.get(session, now)
	if !ok && req.GetRetentionSeconds() > 0 {
		ret, ok = retention{priority: b.cfg.ResidentRetainPriority, ttl: req.GetRetentionSeconds()}, true
	}
	if ok && b.cfg.Engine == VLLM && !b.cfg.VLLMRetention {
		if b.stats.retentionDropped.Add(1) == 1 {
			b.log.Warn("the engine takes no per-request retention (a vLLM release): retention asked by the scheduler or hints does nothing here; --vllm-retention-directives if the build has vLLM PR #38514")
		}
		return retention{}, false
	}
	return ret, ok
}

func outcome(a *kvv1.KvHintAction, res kvv1.HintResult, reason string) *kvv1.KvHintOutcome {
	return &kvv1.KvHintOutcome{ActionId: a.GetActionId(), Result: res, Reason: reason}
}

func reject(a *kvv1.KvHintAction, reason string) *kvv1.KvHintOutcome {
	return outcome(a, kvv1.HintResult_HINT_RESULT_REJECTED, reason)
}

// ApplyHints maps each action of an envelope onto what the engine offers
// and answers it:
//
//	retain          SGLang: priority + retention_seconds on the session's
//	                next requests (HiRadixCache) → deferred. vLLM: only with
//	                --vllm-retention-directives (retention_directives, PR
//	                #38514) → deferred; otherwise rejected.
//	pin             as retain at the top priority with the pin's TTL →
//	                clipped (both engines' retention is an eviction bias,
//	                never a pin).
//	release_session the session's retention is forgotten → accepted.
//	share, prefetch, demote, opaque → rejected: neither engine can be told
//	                to pull or move given blocks outside a request.
func (b *Backend) ApplyHints(actions []*kvv1.KvHintAction, now time.Time) []*kvv1.KvHintOutcome {
	out := make([]*kvv1.KvHintOutcome, len(actions))
	for i, a := range actions {
		out[i] = b.applyHint(a, now)
	}
	return out
}

// HintSupport is what the shim announces for this engine: retain (the
// engine's priority scale, per request) and release_session (forget the
// retention) where the engine has per-request retention — SGLang, and vLLM
// with --vllm-retention-directives — and nothing otherwise. Both act with
// the session's next requests (NextRequests). Pin is not announced: both
// engines' retention is an eviction bias, never a pin; share, prefetch and
// demote have no engine API (ApplyHints).
func (b *Backend) HintSupport() hints.Support {
	s := hints.Support{Known: true}
	if ok, _ := b.retentionSupported(); !ok {
		return s
	}
	s.Caps = []hints.Capability{
		{Kind: hints.KindRetain, MaxPriority: b.maxPriority(), NextRequests: true},
		{Kind: hints.KindRelease, NextRequests: true},
	}
	return s
}

// maxPriority is the top of the engine's retention scale.
func (b *Backend) maxPriority() int {
	if b.cfg.Engine == VLLM {
		return 100 // vLLM retention_directives priority 0–100
	}
	return 99 // SGLang HiRadixCache priority range 0–99
}

func (b *Backend) retentionSupported() (bool, string) {
	if b.cfg.Engine == VLLM && !b.cfg.VLLMRetention {
		return false, "vLLM has no retention API in this build (retention_directives, PR #38514, needs --vllm-retention-directives)"
	}
	return true, ""
}

func (b *Backend) applyHint(a *kvv1.KvHintAction, now time.Time) *kvv1.KvHintOutcome {
	maxPrio := b.maxPriority()
	switch p := a.GetPayload().(type) {
	case *kvv1.KvHintAction_Retain:
		if ok, why := b.retentionSupported(); !ok {
			return reject(a, why)
		}
		sess := p.Retain.GetSessionId()
		if sess == "" {
			return reject(a, "retain needs a session id: engines take retention per request")
		}
		prio := int(p.Retain.GetPriority())
		res, reason := kvv1.HintResult_HINT_RESULT_DEFERRED, "applied to the session's next requests"
		if prio < 0 || prio > maxPrio {
			prio = min(max(prio, 0), maxPrio)
			res, reason = kvv1.HintResult_HINT_RESULT_CLIPPED, fmt.Sprintf("priority clipped to %d; applied to the session's next requests", prio)
		}
		b.hints.set(sess, retentionFor(prio, p.Retain.GetTtlSeconds(), now), now)
		return outcome(a, res, reason)
	case *kvv1.KvHintAction_Pin:
		if ok, why := b.retentionSupported(); !ok {
			return reject(a, why)
		}
		sess := p.Pin.GetSessionId()
		if sess == "" {
			return reject(a, "pin needs a session id: engines take retention per request")
		}
		b.hints.set(sess, retentionFor(maxPrio, p.Pin.GetTtlSeconds(), now), now)
		return outcome(a, kvv1.HintResult_HINT_RESULT_CLIPPED, fmt.Sprintf("the engine cannot pin; top retention priority %d on the session's next requests instead", maxPrio))
	case *kvv1.KvHintAction_ReleaseSession:
		b.hints.release(p.ReleaseSession.GetSessionId())
		return outcome(a, kvv1.HintResult_HINT_RESULT_ACCEPTED, "retention forgotten; the engine evicts the session's blocks by its own policy")
	case *kvv1.KvHintAction_Share:
		if b.cfg.Engine == VLLM {
			return reject(a, "vLLM pulls remote KV only inside a request's kv_transfer_params under a configured KV connector; no out-of-band pull")
		}
		return reject(a, "SGLang has no API to import blocks from another worker")
	case *kvv1.KvHintAction_Prefetch:
		return reject(a, fmt.Sprintf("%s has no API to load given blocks into a tier outside a request", b.cfg.Engine))
	case *kvv1.KvHintAction_Demote:
		return reject(a, fmt.Sprintf("%s has no API to offload given blocks", b.cfg.Engine))
	case *kvv1.KvHintAction_OpaquePayload:
		return reject(a, "opaque payloads are not understood by this adapter")
	case nil:
		return reject(a, "empty action")
	}
	return reject(a, "unknown action type "+a.GetActionType())
}

func retentionFor(prio int, ttl uint32, now time.Time) retention {
	r := retention{priority: prio, ttl: ttl}
	if ttl > 0 {
		r.expires = now.Add(time.Duration(ttl) * time.Second)
	}
	return r
}
