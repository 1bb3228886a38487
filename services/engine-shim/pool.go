package engineshim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/servicekit"
)

// maxPendingPuts bounds the write queue: past it the oldest writes are
// dropped (the pool simply holds less), so a dead pool cannot grow the shim.
const maxPendingPuts = 1 << 16

// poolClient is the simulated engine's shared pool (enginesim.SharedPool)
// over the kv-pool service. Reads are synchronous — the engine is planning
// an admission and needs the answer — with a short timeout, so a slow or
// absent pool is a miss, never a stalled engine. Writes are queued and sent
// in batches by run, as HiCache writes back beside the step.
type poolClient struct {
	conn    *grpc.ClientConn
	client  kvpoolv1.KvPoolServiceClient
	timeout time.Duration

	mu      sync.Mutex
	pending []uint64
	kick    chan struct{}

	readFailures, writeFailures, dropped atomic.Uint64
}

var _ enginesim.SharedPool = (*poolClient)(nil)

func newPoolClient(srv *servicekit.Server, addr string, timeout time.Duration) (*poolClient, error) {
	if timeout <= 0 {
		// Every call would start past its deadline: no pool at all.
		return nil, fmt.Errorf("--pool-timeout %v: must be positive", timeout)
	}
	conn, err := srv.Dial(addr)
	if err != nil {
		return nil, err
	}
	return &poolClient{conn: conn, client: kvpoolv1.NewKvPoolServiceClient(conn), timeout: timeout, kick: make(chan struct{}, 1)}, nil
}

// Put queues block h for the pool.
func (p *poolClient) Put(h kv.BlockHash) {
	p.mu.Lock()
	if len(p.pending) == maxPendingPuts {
		p.pending = p.pending[1:]
		p.dropped.Add(1)
	}
	p.pending = append(p.pending, uint64(h))
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Get asks the pool for the leading complete pages of hs.
func (p *poolClient) Get(hs []kv.BlockHash) int {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	req := &kvpoolv1.GetPrefixRequest{PageHashes: make([]uint64, len(hs))}
	for i, h := range hs {
		req.PageHashes[i] = uint64(h)
	}
	resp, err := p.client.GetPrefix(ctx, req)
	if err != nil {
		p.readFailures.Add(1)
		return 0
	}
	return min(int(resp.GetPages()), len(hs))
}

// run sends queued writes until ctx is done, then closes the connection.
func (p *poolClient) run(ctx context.Context) {
	defer p.conn.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		p.mu.Lock()
		batch := p.pending
		p.pending = nil
		p.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, p.timeout)
		_, err := p.client.PutPages(wctx, &kvpoolv1.PutPagesRequest{PageHashes: batch})
		cancel()
		if err != nil {
			p.writeFailures.Add(1)
			p.dropped.Add(uint64(len(batch)))
		}
	}
}
