package engineshim

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
)

// A request is named once it has run the bound, until its last stream ends:
// a retry's stream that overlaps the end of the one it replaces keeps the
// first one's start; an empty id is never named.
func TestRunningRequestsNamedUntilTheirLastStreamEnds(t *testing.T) {
	r := newRunningRequests()
	t0 := time.Unix(1000, 0)
	doneA := r.start("a", t0)
	r.start("", t0)
	doneB := r.start("b", t0.Add(20*time.Second))
	retryA := r.start("a", t0.Add(25*time.Second))
	check := func(at time.Duration, want ...string) {
		t.Helper()
		if got := r.longer(t0.Add(at), 30*time.Second); !slices.Equal(got, want) {
			t.Fatalf("at %v: named %v, want %v", at, got, want)
		}
	}
	check(29 * time.Second)
	check(30*time.Second, "a")
	check(50*time.Second, "a", "b")
	doneA()
	check(50*time.Second, "a", "b") // a's retry still runs
	retryA()
	doneB()
	check(time.Hour)
}

// A heartbeat says how old its load's sample is: none without its time, 0
// for a clock ahead.
func TestLoadAge(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		observed *timestamppb.Timestamp
		want     *durationpb.Duration
	}{
		{nil, nil},
		{timestamppb.New(now.Add(-1500 * time.Millisecond)), durationpb.New(1500 * time.Millisecond)},
		{timestamppb.New(now.Add(time.Second)), durationpb.New(0)},
	} {
		if got := loadAge(&workerv1.WorkerLoad{ObservedAt: tc.observed}, now); !proto.Equal(got, tc.want) {
			t.Errorf("observed %v: age %v, want %v", tc.observed.AsTime(), got, tc.want)
		}
	}
}
