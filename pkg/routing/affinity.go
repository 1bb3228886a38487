package routing

import "time"

// binding ties a session to a worker. While requests of the session are in
// flight (leases > 0) the binding cannot expire; when the last one ends the
// idle timer restarts (dynamo.md §1.4).
type binding struct {
	worker       string
	leases       int
	idleDeadline time.Time
}

// Affinity is the table of session bindings.
type Affinity struct {
	ttl      time.Duration
	bindings map[string]*binding
}

// NewAffinity returns an empty table whose idle bindings live for ttl.
func NewAffinity(ttl time.Duration) *Affinity {
	return &Affinity{ttl: ttl, bindings: map[string]*binding{}}
}

// Lookup returns the live binding of a session.
func (a *Affinity) Lookup(now time.Time, session string) (string, bool) {
	b := a.bindings[session]
	if b == nil {
		return "", false
	}
	if b.leases == 0 && !now.Before(b.idleDeadline) {
		delete(a.bindings, session)
		return "", false
	}
	return b.worker, true
}

// Acquire binds the session to worker (moving it if it was elsewhere: soft
// mode, or a worker that vanished) and takes a lease for one request.
func (a *Affinity) Acquire(now time.Time, session, worker string) {
	b := a.bindings[session]
	if b == nil {
		b = &binding{}
		a.bindings[session] = b
	}
	if b.worker != worker {
		b.worker = worker
	}
	b.leases++
	b.idleDeadline = now.Add(a.ttl)
}

// Release ends one request's lease; the idle timer restarts from now.
func (a *Affinity) Release(now time.Time, session string) {
	b := a.bindings[session]
	if b == nil {
		return
	}
	if b.leases > 0 {
		b.leases--
	}
	b.idleDeadline = now.Add(a.ttl)
}

// Forget drops a session's binding (the session ended).
func (a *Affinity) Forget(session string) { delete(a.bindings, session) }

// RemoveWorker invalidates every binding to a worker that left the fleet.
func (a *Affinity) RemoveWorker(worker string) int {
	n := 0
	for s, b := range a.bindings {
		if b.worker == worker {
			delete(a.bindings, s)
			n++
		}
	}
	return n
}

// Expire drops idle bindings past their deadline and returns how many.
func (a *Affinity) Expire(now time.Time) int {
	n := 0
	for s, b := range a.bindings {
		if b.leases == 0 && !now.Before(b.idleDeadline) {
			delete(a.bindings, s)
			n++
		}
	}
	return n
}

// Len is the number of bindings, live or not yet reaped.
func (a *Affinity) Len() int { return len(a.bindings) }
