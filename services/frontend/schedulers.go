package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

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
	// probes ask a replica's health while a Route waits on it (watched);
	// silent is set while a replica has failed one and not answered one
	// since, and reprobing while a probe of a silent replica is out.
	probes            []*healthProbe
	silent, reprobing []atomic.Bool
	ctx               context.Context // ends with close: the reprobes
	cancel            context.CancelFunc
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
	for i, c := range x.conns {
		x.probes = append(x.probes, newHealthProbe(c, "scheduler replica "+x.names[i]))
	}
	x.silent, x.reprobing = make([]atomic.Bool, len(x.conns)), make([]atomic.Bool, len(x.conns))
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.sessionsOut, x.programsOut = make([]outage, len(x.conns)), make([]outage, len(x.conns))
	return x, nil
}

func (x *schedulers) close() {
	if x.cancel != nil {
		x.cancel()
	}
	for _, c := range x.conns {
		c.Close()
	}
}

// order is the replicas to ask for a turn of key, in turn: its owner
// first, then the next owners; those whose connection is failing now, or
// that did not answer a health check (silent), go last, so that a dead or
// frozen owner costs no call while it is known to be so.
func (x *schedulers) order(key admission.Key, out []int) []int {
	if len(x.clients) == 1 {
		return append(out[:0], 0)
	}
	out = turns.Rank(key, x.names, out)
	down := func(i int) bool {
		if x.silent[i].Load() {
			x.reprobe(i)
			return true
		}
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

// watched runs call, a Route to replica i, and while it has no answer asks
// the replica's health every probeAfter (probe.go): a replica that does not
// answer one fails the call UNAVAILABLE, so that the turn goes to the next
// owner at once rather than when the connection's keepalive gives up, and
// counts as down (order) until it answers again. A Route may rightly wait
// for minutes (admission); a replica holding one answers its health checks.
func (x *schedulers) watched(ctx context.Context, i int, call func(context.Context) error) error {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex // the timer, which its own function resets, and answered
	var timer *time.Timer
	answered := false
	probe := func() {
		err := x.probes[i].alive(cctx)
		switch {
		case cctx.Err() != nil:
		case err == nil, errors.Is(err, errNoVerdict):
			mu.Lock()
			if !answered { // not once call has returned
				timer.Reset(probeAfter)
			}
			mu.Unlock()
		default:
			x.silent[i].Store(true)
			cancel(status.Error(codes.Unavailable, err.Error()))
		}
	}
	mu.Lock()
	timer = time.AfterFunc(probeAfter, probe)
	mu.Unlock()
	err := call(cctx)
	mu.Lock()
	answered = true
	timer.Stop()
	mu.Unlock()
	if cause := context.Cause(cctx); err != nil && ctx.Err() == nil && status.Code(cause) == codes.Unavailable {
		return cause
	}
	return err
}

// reprobe asks a silent replica's health again, at most one probe at a
// time and, by the probe's own reuse, one every probeAfter: a replica that
// answers is asked again from its next turn.
func (x *schedulers) reprobe(i int) {
	if !x.reprobing[i].CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer x.reprobing[i].Store(false)
		if x.probes[i].alive(x.ctx) == nil {
			x.silent[i].Store(false)
		}
	}()
}
