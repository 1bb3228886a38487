package frontend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard.dev/services/servicekit"
)

// connPool keeps one client connection per engine shim address. Addresses
// come and go with workers (a pod's address dies with it), so a connection
// no attempt holds and none has used for connIdleTTL is closed at the next
// sweep: the pool stays the size of the live fleet, and a long generation
// never loses its connection under it.
type connPool struct {
	dial      func(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error)
	mu        sync.Mutex
	conns     map[string]*pooledConn
	lastSweep time.Time
	now       func() time.Time
}

type pooledConn struct {
	conn     *grpc.ClientConn
	lastUsed time.Time // guarded by the pool's mu, as is inUse
	inUse    int       // attempts holding it

	// One health probe at a time for every silent attempt on this
	// connection (watchdog.go): they join the probe in flight, or take the
	// answer of one that ended less than probeAfter ago.
	probeMu  sync.Mutex
	probing  chan struct{} // closed when the probe in flight ends
	probeErr error         // the last probe's verdict: nil alive
	probedAt time.Time     // when it ended; zero: no verdict to reuse
}

// connIdleTTL is how long an unused shim connection is kept.
const connIdleTTL = 10 * time.Minute

func newConnPool(dial func(string, ...grpc.DialOption) (*grpc.ClientConn, error)) *connPool {
	return &connPool{dial: dial, conns: map[string]*pooledConn{}, now: time.Now}
}

// acquire returns the connection to the shim at addr, dialled on first use
// and held until release.
func (p *connPool) acquire(addr string) (*pooledConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return nil, errPoolClosed
	}
	now := p.now()
	if now.Sub(p.lastSweep) > connIdleTTL/10 {
		p.lastSweep = now
		for a, c := range p.conns {
			if c.inUse == 0 && now.Sub(c.lastUsed) > connIdleTTL {
				c.conn.Close()
				delete(p.conns, a)
			}
		}
	}
	c, ok := p.conns[addr]
	if !ok {
		conn, err := p.dial(addr)
		if err != nil {
			return nil, err
		}
		c = &pooledConn{conn: conn}
		p.conns[addr] = c
	}
	c.inUse++
	c.lastUsed = now
	return c, nil
}

// release ends an attempt's hold on c.
func (p *connPool) release(c *pooledConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.inUse--
	c.lastUsed = p.now()
}

// len is how many connections the pool holds.
func (p *connPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.conn.Close()
	}
	p.conns = nil
}

// errNoVerdict: the probe a caller joined ended with its own attempt, before
// the shim answered; ask again later.
var errNoVerdict = errors.New("no verdict")

// alive asks the shim's grpc.health.v1 whether it is serving, within
// probeTimeout of ctx: nil when it is (or has no health service), else why
// not. However many attempts ask at once, the shim gets one probe.
func (c *pooledConn) alive(ctx context.Context) error {
	c.probeMu.Lock()
	if c.probing == nil && !c.probedAt.IsZero() && time.Since(c.probedAt) < probeAfter {
		err := c.probeErr
		c.probeMu.Unlock()
		return err
	}
	if running := c.probing; running != nil {
		c.probeMu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return errNoVerdict
		}
		c.probeMu.Lock()
		err, at := c.probeErr, c.probedAt
		c.probeMu.Unlock()
		if at.IsZero() {
			return errNoVerdict
		}
		return err
	}
	done := make(chan struct{})
	c.probing = done
	c.probeMu.Unlock()

	err := c.check(ctx)
	c.probeMu.Lock()
	c.probing = nil
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		c.probedAt = time.Time{} // this attempt ended: no verdict on the shim
		err = errNoVerdict
	} else {
		c.probeErr, c.probedAt = err, time.Now()
	}
	c.probeMu.Unlock()
	close(done)
	return err
}

func (c *pooledConn) check(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := servicekit.CheckHealth(pctx, c.conn)
	switch {
	case err == nil, status.Code(err) == codes.Unimplemented: // no health service: nothing to learn
		return nil
	case errors.Is(err, servicekit.ErrNotServing):
		return fmt.Errorf("worker silent and its shim is %w", err)
	default:
		return fmt.Errorf("worker silent and its shim did not answer a health check within %v", probeTimeout)
	}
}
