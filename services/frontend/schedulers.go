package frontend

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/turns"
	"switchyard.dev/services/servicekit"
)

// schedulers are the scheduler replicas (Config.SchedulerAddr, a
// comma-separated list every frontend is given alike). Each program has one
// owner among them, which every frontend computes alone from the list, with
// no lookup (turns.Rank: rendezvous hashing of the tenant-scoped session, a
// sub-agent with its parent): a session's turns reach the replica that holds
// its program whichever frontend serves them. When the owner does not answer
// the next in rank is asked, which is where that session's program lives
// while the owner is gone (it rebuilds it: placement from the flash index,
// phase from the turns it is sent). A turn's FinishRequest goes to the
// replica that routed it.
type schedulers struct {
	names   []string
	conns   []*grpc.ClientConn
	clients []schedulerv1.SchedulerServiceClient
	// resetAt is, per replica, when its connection's backoff was last cut
	// short (unix ns): at most once per reconnectEvery, however many turns
	// find it down.
	resetAt []atomic.Int64
	// sessionsOut and programsOut log, per replica, an outage of the admin
	// view's and the console's calls once (outage.go).
	sessionsOut, programsOut []outage
}

// reconnectEvery is how often a failing replica's connection is tried
// again ahead of its backoff (up to a second).
const reconnectEvery = 100 * time.Millisecond

func dialSchedulers(list string, dial func(string, ...grpc.DialOption) (*grpc.ClientConn, error)) (*schedulers, error) {
	x := &schedulers{names: servicekit.SplitList(list)}
	if len(x.names) == 0 {
		return nil, fmt.Errorf("frontend: no scheduler address in %q", list)
	}
	for _, a := range x.names {
		conn, err := dial(a)
		if err != nil {
			x.close()
			return nil, err
		}
		x.conns = append(x.conns, conn)
		x.clients = append(x.clients, schedulerv1.NewSchedulerServiceClient(servicekit.NewCallConn(conn)))
	}
	x.resetAt = make([]atomic.Int64, len(x.conns))
	x.sessionsOut, x.programsOut = make([]outage, len(x.conns)), make([]outage, len(x.conns))
	return x, nil
}

func (x *schedulers) close() {
	for _, c := range x.conns {
		c.Close()
	}
}

// order is the replicas to ask for a turn of key, in turn: its owner
// first, then the next owners; those whose connection is failing now go
// last, so that a dead owner costs no call while its connection says so.
func (x *schedulers) order(key admission.Key, out []int) []int {
	if len(x.clients) == 1 {
		return append(out[:0], 0)
	}
	out = turns.Rank(key, x.names, out)
	down := func(i int) bool {
		if x.conns[i].GetState() != connectivity.TransientFailure {
			return false
		}
		// Reconnect soon rather than when the connection's backoff (up to
		// a second) ends: a restarted replica gets its sessions back within
		// reconnectEvery of listening.
		now := time.Now().UnixNano()
		if last := x.resetAt[i].Load(); now-last >= int64(reconnectEvery) && x.resetAt[i].CompareAndSwap(last, now) {
			x.conns[i].ResetConnectBackoff()
		}
		return true
	}
	slices.SortStableFunc(out, func(a, b int) int {
		switch da, db := down(a), down(b); {
		case da == db:
			return 0
		case db:
			return -1
		}
		return 1
	})
	return out
}

// ownerKey is what a turn's owner is computed from (turns.OwnerKey); a
// turn of no session goes by its request id, any replica.
func ownerKey(tr *turnRequest) admission.Key {
	if tr.agent.SessionID == "" && tr.agent.ParentSessionID == "" {
		return admission.Key{Tenant: tr.tenant, SessionID: "\x00" + tr.requestID}
	}
	return turns.OwnerKey(admission.Key{Tenant: tr.tenant, SessionID: tr.agent.SessionID}, tr.agent.ParentSessionID)
}
