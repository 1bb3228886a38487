package enginesim

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"switchyard.dev/pkg/hints"
)

// The engine announces what ApplyHint can do with its tiers: no demote or
// prefetch without a host or disk tier to move blocks to and from.
func TestHintSupport(t *testing.T) {
	all := []hints.Capability{{Kind: hints.KindShare}, {Kind: hints.KindPrefetch}, {Kind: hints.KindDemote}, {Kind: hints.KindRelease}}
	for _, tc := range []struct {
		name       string
		host, disk int
		want       []hints.Capability
	}{
		{"device only", 0, 0, []hints.Capability{{Kind: hints.KindShare}, {Kind: hints.KindRelease}}},
		{"host tier", 64, 0, all},
		{"disk tier", 0, 64, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Config{NumGPUBlocks: 64, HostBlocks: tc.host, DiskBlocks: tc.disk})
			if err != nil {
				t.Fatal(err)
			}
			got := e.HintSupport()
			if diff := cmp.Diff(hints.Support{Known: true, Caps: tc.want}, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			// What is not announced is refused.
			for _, k := range []hints.Kind{hints.KindDemote, hints.KindPrefetch, hints.KindRetain} {
				if _, ok := got.Of(k); !ok {
					if o := e.ApplyHint(Hint{Kind: k, SessionID: "s"}); o.Status != hints.ResultRejected {
						t.Errorf("%v not announced, answered %v", k, o.Status)
					}
				}
			}
		})
	}
}
