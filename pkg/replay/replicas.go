package replay

import (
	"fmt"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/turns"
)

// Scheduler replicas (Config.SchedulerReplicas): one pipeline each, the
// code a scheduler replica runs, every program owned by the replica
// rendezvous hashing names (turns.Owner, as every frontend finds it; a
// sub-agent's is its parent's, turns.OwnerKey), and
// admission deciding with its share of each worker (admission.SetShares)
// from what the other replicas' programs use there and the room their
// paused programs ask for. What replicas tell each other is that
// (admission.Use) per worker: each publishes it every syncEvery, and a
// replica hears another's as it was SyncDelay ago (with SyncDelay 0 it reads
// the others' live). Routing needs no other exchange: the engines' loads and
// the flash index, which every replica reads, are shared state already, and a
// sub-agent follows its parent's binding on the replica that owns both.
type replicas struct {
	names []string
	pipes []*turns.Pipeline
	delay time.Duration
	every time.Duration
	// hist is each replica's published uses, oldest first: what the others
	// may hear (those older than the newest one heard are dropped).
	hist    [][]useSnapshot
	workers []string // worker ids, the index of a snapshot's uses
}

type useSnapshot struct {
	at  time.Duration
	use []admission.Use // per worker, in replicas.workers order
}

// A replica publishes its use every SyncDelay, but at least every
// maxSyncEvery and at most every minSyncEvery: the staleness a replica
// hears is SyncDelay plus up to one period. Until a publication SyncDelay
// old exists (the run's first SyncDelay) a replica hears nothing of the
// others, inside the warmup.
const (
	maxSyncEvery = 100 * time.Millisecond
	minSyncEvery = time.Millisecond
)

func newReplicas(n int, delay time.Duration, build func() (*turns.Pipeline, error)) (*replicas, error) {
	r := &replicas{delay: delay, every: min(max(delay, minSyncEvery), maxSyncEvery), hist: make([][]useSnapshot, n)}
	for i := range n {
		p, err := build()
		if err != nil {
			return nil, err
		}
		r.names = append(r.names, fmt.Sprintf("scheduler-%d", i))
		r.pipes = append(r.pipes, p)
	}
	return r, nil
}

func (r *replicas) owner(k admission.Key) int {
	if len(r.pipes) == 1 {
		return 0
	}
	return turns.Owner(k, r.names)
}

// syncing: there is more than one replica and what they hear lags.
func (r *replicas) syncing() bool { return len(r.pipes) > 1 && r.delay > 0 }

// publish records every replica's use at now.
func (r *replicas) publish(now time.Duration) {
	for i, p := range r.pipes {
		snap := useSnapshot{at: now, use: p.UsesOf(r.workers)}
		h := append(r.hist[i], snap)
		// Keep the newest snapshot old enough to be heard, and what follows.
		k := 0
		for k+1 < len(h) && h[k+1].at <= now-r.delay {
			k++
		}
		r.hist[i] = append(h[:0], h[k:]...)
	}
}

// heard is what replica q's programs use on worker j, as the others hear it
// at now.
func (r *replicas) heard(q, j int, now time.Duration) admission.Use {
	if r.delay == 0 {
		return r.pipes[q].UsesOf(r.workers[j : j+1])[0]
	}
	h := r.hist[q]
	for k := len(h) - 1; k >= 0; k-- {
		if h[k].at <= now-r.delay {
			return h[k].use[j]
		}
	}
	return admission.Use{}
}

// share makes replica i's admission decide with its share of every worker
// before it decides anything at now.
func (r *replicas) share(i int, now time.Duration, byID map[string]int) {
	if len(r.pipes) == 1 {
		return
	}
	r.pipes[i].Share(func(worker string) admission.Use { return r.others(i, byID[worker], now) },
		len(r.pipes), 0) // the others' uses move with every turn they take: no version
}

// others is what the replicas other than i use on worker j, as i hears
// it at now.
func (r *replicas) others(i, j int, now time.Duration) admission.Use {
	var u admission.Use
	for q := range r.pipes {
		if q != i {
			u = u.Add(r.heard(q, j, now))
		}
	}
	return u
}

// othersOf is others for every worker, by id (nil with one replica): what
// a recorded call says replica i decided with.
func (r *replicas) othersOf(i int, now time.Duration) map[string]admission.Use {
	if len(r.pipes) == 1 {
		return nil
	}
	out := make(map[string]admission.Use, len(r.workers))
	for j, w := range r.workers {
		out[w] = r.others(i, j, now)
	}
	return out
}
