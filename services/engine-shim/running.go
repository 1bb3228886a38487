package engineshim

import (
	"slices"
	"sync"
	"time"
)

// runningRequests are the requests the shim is generating (their Generate
// stream open), each with when it began. The heartbeats name those running
// registry.LongRunning or longer, so that the scheduler does not take a turn
// that runs long for one whose finish was lost; a request whose frontend
// went away ends with its stream and is no longer named. Safe for
// concurrent use.
type runningRequests struct {
	mu    sync.Mutex
	began map[string]runningRequest
}

// runningRequest is one request id's streams: how many are open (a
// frontend's retry may overlap the end of the attempt it replaces) and when
// the first of them began.
type runningRequest struct {
	began time.Time
	open  int
}

func newRunningRequests() *runningRequests {
	return &runningRequests{began: map[string]runningRequest{}}
}

// start records request id beginning at now, until the returned func is
// called. An empty id (a caller that names none) is not recorded.
func (r *runningRequests) start(id string, now time.Time) (done func()) {
	if id == "" {
		return func() {}
	}
	r.mu.Lock()
	e, ok := r.began[id]
	if !ok {
		e.began = now
	}
	e.open++
	r.began[id] = e
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if e := r.began[id]; e.open > 1 {
			e.open--
			r.began[id] = e
		} else {
			delete(r.began, id)
		}
	}
}

// longer returns the ids running for d or longer at now, sorted.
func (r *runningRequests) longer(now time.Time, d time.Duration) []string {
	r.mu.Lock()
	var ids []string
	for id, e := range r.began {
		if now.Sub(e.began) >= d {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	slices.Sort(ids)
	return ids
}
