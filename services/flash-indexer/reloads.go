package flashindexer

import "sync"

// reloads tracks, per worker, the snapshot loads in progress
// (indexSink.Resync). A load clears the worker's cache in the index and then
// applies its blocks event by event, so meanwhile the index holds only part
// of it: what FindResident read there would say an idle program holds less
// than it does, and admission would resume programs into room that is not
// free. FindResident compares a worker's state before and after its lookup
// and calls the answer stale when a load was in progress or ran in between.
type reloads struct {
	mu sync.Mutex
	by map[string]reloadState
}

// reloadState is one worker's: loads in progress, and loads begun and
// ended so far (a load that ran wholly between two looks changes it).
type reloadState struct {
	active int
	seq    uint64
}

func (r *reloads) begin(worker string) { r.change(worker, +1) }
func (r *reloads) end(worker string)   { r.change(worker, -1) }

func (r *reloads) change(worker string, d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]reloadState{}
	}
	st := r.by[worker]
	st.active += d
	st.seq++
	r.by[worker] = st
}

// forget drops a removed worker's state (a lookup across the removal sees
// it change, or finds the worker unknown to the index).
func (r *reloads) forget(worker string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.by, worker)
}

func (r *reloads) state(worker string) reloadState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[worker]
}

// unsettled reports whether a lookup of worker that saw before and then
// after (state, around it) may have read a load half done.
func unsettled(before, after reloadState) bool { return before.active > 0 || before != after }
