package replay

import (
	"fmt"
	"testing"
	"time"

	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/trace"
)

// The simulated workers announce what their tiers allow: without a host or
// disk tier they take no demote or prefetch, so the policies' demotes are
// not sent (HintsUnsupported) and the engines are asked only what they can
// do; with a host tier everything goes out as proposed.
func TestHintsFollowTheEnginesSupport(t *testing.T) {
	var sessions []*trace.Session
	for i := range 8 {
		sessions = append(sessions, growing(fmt.Sprintf("s%d", i), uint64(i+1), 6, 20*time.Second))
	}
	w := &trace.Workload{Name: "hints", BlockSize: 64, Sessions: sessions}
	runHints := func(host int) Result {
		c := smallConfig(PolicyKV, 2, 8)
		c.Engine.NumGPUBlocks = 128
		c.Engine.HostBlocks = host
		hc := hints.DefaultConfig()
		hc.Disabled = nil // demote on long tool calls included
		c.Hints = &hc
		return run(t, w, c)
	}
	tierless, host := runHints(0), runHints(256)
	if tierless.HintsUnsupported == 0 {
		t.Fatalf("without a host tier no demote was held back: %+v", tierless.HintsByResult)
	}
	if host.HintsUnsupported != 0 || host.HintBlocksMoved == 0 {
		t.Fatalf("with a host tier: %d unsupported, %d blocks moved", host.HintsUnsupported, host.HintBlocksMoved)
	}
}
