package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestShedNewSessionIsResourceExhaustedWithRetryInfo: with shedding on and
// a paused backlog past it, a new session's Route is RESOURCE_EXHAUSTED
// with the configured RetryInfo (the frontend's 429 and Retry-After), and
// it is counted.
func TestShedNewSessionIsResourceExhaustedWithRetryInfo(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		sessionAwareThunderAgent(c)
		c.Admission.ShedBacklog = 0.1
		c.Admission.ShedRetryAfter = 3 * time.Second
	})
	pausedSetup(t, h)
	_, err := h.client.Route(context.Background(), routeReq("new-1", "newcomer", 160))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("route of a new session: %v, want ResourceExhausted", err)
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if delay != 3*time.Second {
		t.Fatalf("retry delay %v, want 3s (details %v)", delay, st.Details())
	}
	if n := testutil.ToFloat64(h.svc.metrics.shed); n != 1 {
		t.Fatalf("shed counter %v, want 1", n)
	}
}
