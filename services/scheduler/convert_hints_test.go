package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/registry"
)

// A worker's hint support goes from its registration through the registry to
// the worker watch unchanged: absent stays absent (a shim that announces
// nothing), an empty list stays an empty list (an engine that acts on no
// hint), and an action type this scheduler does not know is dropped.
func TestHintSupportCarriedToWatchers(t *testing.T) {
	retain := &kvv1.HintCapability{ActionType: "kv.retain@1", MaxPriority: 99, MaxTtlSeconds: 600, NextRequests: true}
	release := &kvv1.HintCapability{ActionType: "kv.release_session@1", NextRequests: true}
	tests := []struct {
		name    string
		in, out *kvv1.HintSupport
	}{
		{"not announced", nil, nil},
		{"acts on nothing", &kvv1.HintSupport{}, &kvv1.HintSupport{}},
		{"SGLang", &kvv1.HintSupport{Capabilities: []*kvv1.HintCapability{retain, release}},
			&kvv1.HintSupport{Capabilities: []*kvv1.HintCapability{retain, release}}},
		{"simulator, with a kind from the future", &kvv1.HintSupport{Capabilities: []*kvv1.HintCapability{
			{ActionType: "kv.demote@1"}, {ActionType: "kv.teleport@1"}, {ActionType: "kv.share@1", MaxBlocks: 512}}},
			&kvv1.HintSupport{Capabilities: []*kvv1.HintCapability{{ActionType: "kv.demote@1"}, {ActionType: "kv.share@1", MaxBlocks: 512}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := registry.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			w := &workerv1.Worker{WorkerId: "w0", Address: "127.0.0.1:1", Engine: "sglang", BlockSize: 16, HintSupport: tt.in}
			if _, err := r.Register(time.Unix(0, 0), workerFromProto(w)); err != nil {
				t.Fatal(err)
			}
			got := workerToProto(*r.Snapshot()[0]).GetHintSupport()
			if diff := cmp.Diff(tt.out, got, protocmp.Transform()); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if (tt.out == nil) != (got == nil) {
				t.Fatalf("presence: got %v, want %v", got, tt.out)
			}
		})
	}
}
