package registry

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/hints"
)

// A re-registration that announces other hint support is a membership
// change (watchers, the hint emitter among them, hear of it); the same
// announcement again is not. The registry keeps its own copy.
func TestHintSupportIsMembership(t *testing.T) {
	r := newReg(t)
	w := worker("a")
	w.Hints = hints.Support{Known: true, Caps: []hints.Capability{{Kind: hints.KindRetain, MaxPriority: 99, NextRequests: true}}}
	if changed, err := r.Register(t0, w); err != nil || !changed {
		t.Fatalf("register: %v %v", changed, err)
	}
	again := w
	again.Hints.Caps = append([]hints.Capability(nil), w.Hints.Caps...)
	if changed, _ := r.Register(t0, again); changed {
		t.Fatal("the same announcement changed membership")
	}
	w.Hints.Caps[0].MaxPriority = 1 // the caller's slice
	got, _ := r.Get("a")
	if diff := cmp.Diff(again.Hints, got.Hints); diff != "" {
		t.Fatalf("stored support (-want +got):\n%s", diff)
	}
	less := worker("a")
	less.Hints = hints.Support{Known: true}
	if changed, _ := r.Register(t0, less); !changed {
		t.Fatal("a changed announcement left membership unchanged")
	}
	if changed, _ := r.Register(t0, worker("a")); !changed {
		t.Fatal("no announcement (an older shim) is not the empty one")
	}
}
