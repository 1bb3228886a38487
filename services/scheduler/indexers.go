package scheduler

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	agentv1 "switchyard.dev/gen/switchyard/agent/v1"
	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/services/servicekit"
)

// Flash indexer replicas. Every flash indexer follows every worker's event
// stream, so any one that has caught up answers FindMatches alike. A
// session's lookups start with the indexer that kept its previous chain (to
// name it as their base), else with one a hash of the session picks; other
// lookups with the next in rotation. Each fails over to the next within
// the call's deadline; an indexer that is rebuilding from the
// workers' snapshots (it just started) says so in its health
// (servicekit.CaughtUpService NOT_SERVING) and is not asked until it has
// caught up. Predictions go to every caught-up indexer, so that whichever
// answers the next lookup has them.

// indexer is one flash indexer.
type indexer struct {
	addr   string
	conn   *grpc.ClientConn // nil for an injected client
	client flashindexv1.FlashIndexerServiceClient
	ready  atomic.Bool
}

// indexers are the flash indexers a scheduler asks.
type indexers struct {
	list []*indexer
	next atomic.Uint64
}

// errNoIndexer: no flash indexer has caught up (or none answers).
var errNoIndexer = errors.New("no flash indexer is caught up")

// dialIndexers dials every address of list (lazily: indexers may start
// after the scheduler).
func dialIndexers(list string, dial func(string, ...grpc.DialOption) (*grpc.ClientConn, error)) (*indexers, error) {
	addrs := servicekit.SplitList(list)
	if len(addrs) == 0 {
		return nil, errors.New("scheduler: no flash indexer address")
	}
	x := &indexers{}
	for _, a := range addrs {
		conn, err := dial(a)
		if err != nil {
			x.close()
			return nil, err
		}
		x.list = append(x.list, &indexer{addr: a, conn: conn, client: flashindexv1.NewFlashIndexerServiceClient(servicekit.NewCallConn(conn))})
	}
	return x, nil
}

// oneIndexer wraps an injected client, always asked.
func oneIndexer(c flashindexv1.FlashIndexerServiceClient) *indexers {
	i := &indexer{addr: "injected", client: c}
	i.ready.Store(true)
	return &indexers{list: []*indexer{i}}
}

func (x *indexers) close() {
	for _, i := range x.list {
		if i.conn != nil {
			i.conn.Close()
		}
	}
}

// watch keeps every dialled indexer's readiness from its health until ctx
// ends.
func (x *indexers) watch(ctx context.Context, m *metrics) {
	var wg sync.WaitGroup
	for _, i := range x.list {
		if i.conn == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			i.watch(ctx, m)
		}()
	}
	wg.Wait()
}

// watch follows the indexer's caught-up status: ready while it says
// SERVING (or does not know the status: an indexer that does not report
// it is asked as before), not while it says otherwise or cannot be reached.
func (i *indexer) watch(ctx context.Context, m *metrics) {
	set := func(ready bool) {
		i.ready.Store(ready)
		v := 0.0
		if ready {
			v = 1
		}
		m.indexerReady.WithLabelValues(i.addr).Set(v)
	}
	set(false)
	client := healthpb.NewHealthClient(i.conn)
	// An indexer that restarts is asked again within a fraction of a second
	// of catching up: the watch is retried often, and each retry ends the
	// connection's own reconnect backoff (up to a second) at once.
	bo := servicekit.Backoff{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}
	for ctx.Err() == nil {
		i.conn.ResetConnectBackoff()
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: servicekit.CaughtUpService})
		for err == nil {
			var resp *healthpb.HealthCheckResponse
			if resp, err = stream.Recv(); err == nil {
				st := resp.GetStatus()
				set(st == healthpb.HealthCheckResponse_SERVING || st == healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
				bo.Reset()
			}
		}
		if status.Code(err) == codes.Unimplemented {
			set(true) // no health service at all: always asked
			return
		}
		set(false)
		if !bo.Wait(ctx) {
			return
		}
	}
}

// findMatches asks the caught-up indexers in turn (askInTurn), starting
// with first (an index of list; -1: the next in rotation), each sent reqFor
// its index, and says which answered (-1: none).
func (x *indexers) findMatches(ctx context.Context, first int, reqFor func(int) *flashindexv1.FindMatchesRequest) (*flashindexv1.FindMatchesResponse, int, error) {
	return askInTurn(ctx, x, first, reqFor, flashindexv1.FlashIndexerServiceClient.FindMatches)
}

// findResident asks the caught-up indexers in turn (askInTurn).
func (x *indexers) findResident(ctx context.Context, req *flashindexv1.FindResidentRequest) (*flashindexv1.FindResidentResponse, error) {
	resp, _, err := askInTurn(ctx, x, -1, func(int) *flashindexv1.FindResidentRequest { return req }, flashindexv1.FlashIndexerServiceClient.FindResident)
	return resp, err
}

// askInTurn asks the caught-up indexers in turn, starting with first (an
// index of x.list; -1: the next in rotation), until one answers within
// ctx's deadline: each but the last gets an even part of what is left of
// it. Each is sent reqFor its index. NOT_FOUND is an answer, not a failure
// to answer (an indexer that does not hold a chain base the request named
// says so; another would not know it either). It returns the index of the
// indexer whose answer it returns (-1: none answered). call is a method of
// the client (a method expression: nothing allocated per call).
func askInTurn[Req, Resp any](ctx context.Context, x *indexers, first int, reqFor func(int) Req,
	call func(flashindexv1.FlashIndexerServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, int, error) {
	n := len(x.list)
	start := first
	if start < 0 || start >= n {
		start = int(x.next.Add(1) % uint64(n))
	}
	var buf [8]int // on the stack for up to 8 indexers: no allocation per route
	ready := buf[:0]
	for k := range n {
		if i := (start + k) % n; x.list[i].ready.Load() {
			ready = append(ready, i)
		}
	}
	var resp Resp
	err := errNoIndexer
	for k, i := range ready {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok && k < len(ready)-1 {
			actx, cancel = context.WithTimeout(ctx, time.Until(d)/time.Duration(len(ready)-k))
		}
		resp, err = call(x.list[i].client, actx, reqFor(i))
		cancel()
		if err == nil || status.Code(err) == codes.NotFound || ctx.Err() != nil {
			return resp, i, err
		}
	}
	var none Resp
	return none, -1, err
}

// sessionIndexer is the indexer a session's lookups start with when none
// holds its chain yet, spreading sessions over the indexers (-1: not a
// session's lookup, which goes to the next in rotation).
func (x *indexers) sessionIndexer(a *agentv1.AgentContext) int {
	if a.GetSessionId() == "" {
		return -1
	}
	return int(maphash.String(affinitySeed, agentctx.Scope(a.GetTenant(), a.GetSessionId())) % uint64(len(x.list)))
}

var affinitySeed = maphash.MakeSeed()

// predictRoute tells every caught-up indexer, at once, and returns the
// first error.
func (x *indexers) predictRoute(ctx context.Context, req *flashindexv1.PredictRouteRequest) error {
	if len(x.list) == 1 {
		_, err := x.list[0].client.PredictRoute(ctx, req, servicekit.NoAnswer())
		return err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, i := range x.list {
		if !i.ready.Load() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := i.client.PredictRoute(ctx, req, servicekit.NoAnswer()); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
