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

// A watch's reason lists are bounded before it subscribes: every program
// change is matched against them under the routing lock. A reason the
// scheduler does not publish matches nothing, and is no error: a newer
// watcher may name one an older scheduler lacks.
func TestWatchProgramsBoundsItsReasons(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy = "session_aware" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := make([]string, maxWatchReasons+1)
	for i := range long {
		long[i] = "acting"
	}
	for _, tc := range []struct {
		name string
		req  *schedulerv1.WatchProgramsRequest
		want string
	}{
		{"too many", &schedulerv1.WatchProgramsRequest{Reasons: long}, "65 reasons"},
		{"too many excepted", &schedulerv1.WatchProgramsRequest{ExceptReasons: long}, "65 reasons"},
		{"too long", &schedulerv1.WatchProgramsRequest{Reasons: []string{strings.Repeat("r", maxReasonBytes+1)}}, "65 bytes"},
	} {
		watch, err := h.client.WatchPrograms(ctx, tc.req)
		if err == nil {
			_, err = watch.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want InvalidArgument saying %s", tc.name, err, tc.want)
		}
	}
	recv := watchPrograms(ctx, t, h, &schedulerv1.WatchProgramsRequest{Reasons: []string{"admitted", "a_reason_of_a_later_version"}})
	if ev := recv(); ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED {
		t.Fatalf("a watch naming a reason this scheduler lacks: want SYNCED, got %v", ev)
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
	} {
		recv := watchPrograms(ctx, t, h, req)
		if ev := recv(); ev.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED {
			t.Fatalf("%v: want SYNCED, got %v", req, ev)
		}
	}
}
