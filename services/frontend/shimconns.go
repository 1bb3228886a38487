package frontend

import (
	"sync"
	"time"

	"google.golang.org/grpc"
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
	// probe is asked by every silent attempt on this connection
	// (watchdog.go).
	probe *healthProbe
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
		c = &pooledConn{conn: conn, probe: newHealthProbe(conn, "worker silent and its shim")}
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
