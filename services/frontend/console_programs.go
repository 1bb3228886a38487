package frontend

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/frontend/console"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/lru"
)

// programLog keeps, for the console, the latest pauses and resumes of each
// program (and why), from every scheduler replica's WatchPrograms stream:
// the program table says what a program is, only its events say why.
// Bounded like the frontend's session table.
type programLog struct {
	mu  sync.Mutex
	lru *lru.Cache[[]console.Admission]
}

// admissionsKept is how many decisions a program keeps.
const admissionsKept = 8

// logged are the event reasons the console shows: what admission decided,
// not the turns' own steps (reasoning, acting).
var logged = map[string]bool{
	"queued": true, "paused": true, "marked": true, "resumed": true, "forced_resume": true, "grew": true,
	"rotated": true, "wait_bound": true, "cold": true, "unplaced": true, "released": true, "expired": true,
}

// loggedReasons are logged's reasons, for the watch to ask only for them.
var loggedReasons = slices.Sorted(maps.Keys(logged))

func newProgramLog(max int) *programLog {
	return &programLog{lru: lru.New[[]console.Admission](max)}
}

func (l *programLog) add(e *schedulerv1.WatchProgramsResponse) {
	p := e.GetProgram()
	if e.GetType() != schedulerv1.ProgramEventType_PROGRAM_EVENT_TYPE_CHANGED || !logged[e.GetReason()] {
		return
	}
	at := time.Now() // as heard: within the stream's delay of the decision
	l.mu.Lock()
	defer l.mu.Unlock()
	log := l.lru.Touch(sessionKey(p.GetTenant(), p.GetSessionId()))
	if len(*log) == admissionsKept {
		*log = append((*log)[:0], (*log)[1:]...)
	}
	*log = append(*log, console.Admission{At: at, Reason: e.GetReason(), Lifecycle: lifecycleName(p.GetLifecycle()), WorkerID: p.GetWorkerId()})
}

// of is a copy of key's decisions, oldest first.
func (l *programLog) of(key string) []console.Admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	if log := l.lru.Peek(key); log != nil {
		return append([]console.Admission{}, *log...)
	}
	return []console.Admission{}
}

// watchPrograms follows every scheduler replica's program events into the
// log until ctx ends.
func (s *Service) watchPrograms(ctx context.Context) {
	var wg sync.WaitGroup
	for i, c := range s.scheds.clients {
		wg.Go(func() {
			servicekit.Watch(ctx, servicekit.DefaultBackoff(),
				func(ctx context.Context) (grpc.ServerStreamingClient[schedulerv1.WatchProgramsResponse], error) {
					return c.WatchPrograms(ctx, &schedulerv1.WatchProgramsRequest{Reasons: loggedReasons})
				},
				func(e *schedulerv1.WatchProgramsResponse) bool { s.programLog.add(e); return true },
				func(err error) {
					s.log.Debug("watch programs for the console", "scheduler", s.scheds.names[i], "err", err)
				})
		})
	}
	wg.Wait()
}
