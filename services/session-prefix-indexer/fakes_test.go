package sessionindexer

import (
	"sync"

	"google.golang.org/grpc"

	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/servicekit/servicetest"
)

// fakeScheduler is the kit's worker watch with a fixed program table and a
// route decision stream the test feeds.
type fakeScheduler struct {
	*servicetest.FakeScheduler
	mu        sync.Mutex
	routeSubs []chan *schedulerv1.RouteDecision
}

func newFakeScheduler(workers ...*workerv1.Worker) *fakeScheduler {
	return &fakeScheduler{FakeScheduler: servicetest.NewFakeScheduler(workers...)}
}

// Register serves the whole fake (the embedded Register would serve only the
// worker watch).
func (f *fakeScheduler) Register(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, f) }

// WatchPrograms sends a one-program table (child, a sub-agent of a), then
// SYNCED, then nothing.
func (f *fakeScheduler) WatchPrograms(_ *schedulerv1.WatchProgramsRequest, st grpc.ServerStreamingServer[schedulerv1.WatchProgramsResponse]) error {
	for _, ev := range []*schedulerv1.WatchProgramsResponse{
		{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_EXISTING, Program: &schedulerv1.Program{SessionId: "child", ParentSessionId: "a"}},
		{Type: schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_SYNCED},
	} {
		if err := st.Send(ev); err != nil {
			return err
		}
	}
	<-st.Context().Done()
	return nil
}

// WatchRouteDecisions streams what route sends.
func (f *fakeScheduler) WatchRouteDecisions(_ *schedulerv1.WatchRouteDecisionsRequest, st grpc.ServerStreamingServer[schedulerv1.WatchRouteDecisionsResponse]) error {
	c := make(chan *schedulerv1.RouteDecision, 16)
	f.mu.Lock()
	f.routeSubs = append(f.routeSubs, c)
	f.mu.Unlock()
	for {
		select {
		case <-st.Context().Done():
			return nil
		case d := <-c:
			if err := st.Send(&schedulerv1.WatchRouteDecisionsResponse{Decision: d}); err != nil {
				return err
			}
		}
	}
}

func (f *fakeScheduler) route(d *schedulerv1.RouteDecision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.routeSubs {
		c <- d
	}
}

func (f *fakeScheduler) watchingRoutes() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.routeSubs) > 0
}

// stored is a device-tier BlocksStored event of session.
func stored(session string, parent uint64, blocks ...uint64) *kvv1.KvEvent {
	ev := servicetest.Stored(parent, blocks...)
	ev.SessionId = session
	return ev
}
