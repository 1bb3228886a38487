package adapter

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	"switchyard.dev/pkg/hints"
)

// What a shim announces for its engine is what ApplyHints does something
// with: every announced kind is taken (deferred), and the hint emitter's
// policies are sent nothing else.
func TestHintSupportMatchesApplyHints(t *testing.T) {
	retain := func(top int) hints.Capability {
		return hints.Capability{Kind: hints.KindRetain, MaxPriority: top, NextRequests: true}
	}
	release := hints.Capability{Kind: hints.KindRelease, NextRequests: true}
	for _, tc := range []struct {
		name      string
		engine    Engine
		retention bool
		want      []hints.Capability
	}{
		{"SGLang", SGLang, false, []hints.Capability{retain(99), release}},
		{"vLLM with retention_directives", VLLM, true, []hints.Capability{retain(100), release}},
		{"vLLM release build", VLLM, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(Config{Engine: tc.engine, WorkerID: "w", URL: "http://x", VLLMRetention: tc.retention}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := b.HintSupport()
			if diff := cmp.Diff(hints.Support{Known: true, Caps: tc.want}, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if _, ok := got.Of(hints.KindRetain); ok {
				// The retain the emitter sends in place of a demote.
				a, ok := hints.Nearest(hints.Action{Kind: hints.KindDemote, Session: "s", Worker: "w"}, got, hints.DefaultConfig())
				if !ok || a.Kind != hints.KindRetain {
					t.Fatalf("nearest to a demote: %+v %v", a, ok)
				}
				out := b.ApplyHints([]*kvv1.KvHintAction{{ActionId: "1", Payload: &kvv1.KvHintAction_Retain{Retain: &kvv1.RetainHint{
					SessionId: "s", Priority: int32(a.Priority), TtlSeconds: uint32(a.TTL / time.Second)}}}}, time.Now())
				if out[0].GetResult() != kvv1.HintResult_HINT_RESULT_DEFERRED {
					t.Fatalf("retain answered %v", out[0])
				}
				if r, ok := b.hints.get("s", time.Now()); !ok || r.priority != a.Priority || r.ttl != uint32(a.TTL/time.Second) {
					t.Fatalf("retention %+v %v", r, ok)
				}
			}
			for _, k := range []hints.Kind{hints.KindShare, hints.KindPrefetch, hints.KindDemote} {
				if _, ok := got.Of(k); ok {
					t.Errorf("%v announced: no engine API takes it", k)
				}
			}
		})
	}
}
