package replay

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Scheduler replicas run the same work deterministically, a lone replica is
// the plain scheduler, and with a delay the replicas still serve every
// session (none starves behind another's share).
func TestSchedulerReplicas(t *testing.T) {
	w := randomWorkload(11, 24)
	base := smallConfig(PolicySessionAware, 3, 8)
	base.Engine.NumGPUBlocks = 300 // pressure: admission pauses
	lone := run(t, w, base)
	base.SchedulerReplicas = 1
	if one := run(t, w, base); !cmp.Equal(lone, one) {
		t.Fatalf("one replica differs from the plain scheduler:\n%s", cmp.Diff(lone, one))
	}
	for _, d := range []time.Duration{0, 100 * time.Millisecond, time.Second} {
		c := base
		c.SchedulerReplicas, c.SyncDelay = 3, d
		a, b := run(t, w, c), run(t, w, c)
		if !cmp.Equal(a, b) {
			t.Fatalf("delay %v: same seed, different results:\n%s", d, cmp.Diff(a, b))
		}
		if a.Turns < lone.Turns/2 {
			t.Errorf("delay %v: %d turns, a lone scheduler %d", d, a.Turns, lone.Turns)
		}
	}
}

func TestSchedulerReplicasConfig(t *testing.T) {
	for _, c := range []Config{{SchedulerReplicas: -1}, {SchedulerReplicas: 65}, {SchedulerReplicas: 3, SyncDelay: -time.Second}} {
		c.Window = time.Minute
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
