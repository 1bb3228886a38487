package turns

import "time"

// recentSessions remembers the sessions a pipeline routed within
// inheritHorizon, and some up to twice that long: two generations, the
// older dropped whole when the newer is a horizon old. Forgetting thus
// costs nothing per tick; a pass over every session at each tick, under
// the scheduler's lock, grew with every session of the last day (a client
// naming a new session on each request makes millions).
type recentSessions struct {
	cur, prev map[string]struct{}
	since     time.Time // when cur began; zero before the first age
}

func newRecentSessions() recentSessions {
	return recentSessions{cur: map[string]struct{}{}, prev: map[string]struct{}{}}
}

// has reports whether session was routed within the last horizon (or up
// to two).
func (r *recentSessions) has(session string) bool {
	if _, ok := r.cur[session]; ok {
		return true
	}
	_, ok := r.prev[session]
	return ok
}

func (r *recentSessions) add(session string) { r.cur[session] = struct{}{} }

func (r *recentSessions) forget(session string) {
	delete(r.cur, session)
	delete(r.prev, session)
}

// age starts a new generation once the current one is a horizon old; what
// the older one held and was not routed since is forgotten.
func (r *recentSessions) age(now time.Time) {
	switch {
	case r.since.IsZero():
		r.since = now
	case now.Sub(r.since) >= inheritHorizon:
		r.prev, r.cur, r.since = r.cur, map[string]struct{}{}, now
	}
}
