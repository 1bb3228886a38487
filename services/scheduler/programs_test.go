package scheduler

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
)

// A watch that names a reason the scheduler never publishes is refused,
// naming it and the known ones, before it subscribes: every program change
// is matched against a watch's reasons under the routing lock, so their
// lists must stay small. So is a list longer than there are reasons.
func TestWatchProgramsRefusesUnknownReasons(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := make([]string, len(admission.Reasons)+1)
	for i := range long {
		long[i] = "acting"
	}
	for _, tc := range []struct {
		name string
		req  *schedulerv1.WatchProgramsRequest
		want string
	}{
		{"unknown reason", &schedulerv1.WatchProgramsRequest{Reasons: []string{"acting", "phantom"}}, `"phantom"`},
		{"unknown except", &schedulerv1.WatchProgramsRequest{ExceptReasons: []string{"phantom"}}, `"phantom"`},
		{"snapshot", &schedulerv1.WatchProgramsRequest{Reasons: []string{"snapshot"}}, `"snapshot"`},
		{"too many", &schedulerv1.WatchProgramsRequest{Reasons: long}, "17 reasons"},
	} {
		watch, err := h.client.WatchPrograms(ctx, tc.req)
		if err == nil {
			_, err = watch.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "wait_bound") {
			t.Errorf("%s: got %v, want InvalidArgument naming %s and the known reasons", tc.name, err, tc.want)
		}
	}
}

// The reasons the scheduler's watchers name are accepted: the frontend
// console's (admission's decisions), the session-prefix indexer's (a
// program's creation) and the hint emitter's exceptions (a turn's phases).
func TestWatchProgramsAcceptsWatchersReasons(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	console := []string{"cold", "expired", "forced_resume", "grew", "marked", "paused", "queued", "released", "resumed", "rotated", "unplaced", "wait_bound"}
	for _, req := range []*schedulerv1.WatchProgramsRequest{
		{Reasons: console},
		{Reasons: []string{admission.ReasonAdmitted, admission.ReasonQueued}},
		{ExceptReasons: []string{admission.ReasonReasoning, admission.ReasonActing}},
		{Reasons: admission.Reasons, ExceptReasons: admission.Reasons},
	} {
		recv := watchPrograms(ctx, t, h, req)
		if ev := recv(); ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED {
			t.Fatalf("%v: want SYNCED, got %v", req, ev)
		}
	}
}
