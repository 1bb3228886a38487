package servicetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Serve runs a plain grpc.Server with what register adds on a loopback port
// until the test ends, and returns its address.
func Serve(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	addr, _ := ServeAt(t, "", register)
	return addr
}

// ServeAt is Serve on addr ("" is any loopback port), for a peer that starts
// after the service dialling it, or comes back where it was. stop stops it
// before the test ends (a crash: connections drop, nothing answers); it may be
// called more than once.
func ServeAt(t testing.TB, addr string, register func(*grpc.Server)) (_ string, stop func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	// A peer coming back where it was may find its port taken for a
	// moment: its old port is in the ephemeral range, and a client
	// reconnecting to it can be given it as its own (a connection to
	// itself, which ends once the client finds no server there; CI saw
	// "address already in use" so), or another test's connection can.
	for deadline := time.Now().Add(Patience); errors.Is(err, syscall.EADDRINUSE) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		lis, err = net.Listen("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return lis.Addr().String(), serve(t, lis, register)
}

// serve runs a grpc.Server on lis until the test ends or stop is called.
func serve(t testing.TB, lis net.Listener, register func(*grpc.Server)) (stop func()) {
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			g.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// FreeAddr reserves a loopback port and releases it, so that a peer can be
// started there later (the mesh starts in any order).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Bufnet is an in-memory network of gRPC servers over bufconn, by name: Serve
// starts one, Dial connects to one (Dial is what code under test that takes a
// dial function is given).
type Bufnet struct {
	t    testing.TB
	mu   sync.Mutex
	lis  map[string]*bufconn.Listener
	next int
}

// NewBufnet returns an empty network whose servers stop when the test ends.
func NewBufnet(t testing.TB) *Bufnet {
	return &Bufnet{t: t, lis: map[string]*bufconn.Listener{}}
}

// Serve runs a grpc.Server with what register adds until the test ends, and
// returns its address on the network ("peer-1", "peer-2", ...).
func (n *Bufnet) Serve(register func(*grpc.Server)) string {
	n.mu.Lock()
	n.next++
	addr := fmt.Sprintf("peer-%d", n.next)
	lis := bufconn.Listen(1 << 20)
	n.lis[addr] = lis
	n.mu.Unlock()
	serve(n.t, lis, register)
	return addr
}

// Dial returns a client connection to the server at addr; an address the
// network does not have is an error.
func (n *Bufnet) Dial(addr string) (*grpc.ClientConn, error) {
	n.mu.Lock()
	lis := n.lis[addr]
	n.mu.Unlock()
	if lis == nil {
		return nil, fmt.Errorf("no peer at %s", addr)
	}
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// ServeBufconn serves what register adds over bufconn until the test ends and
// returns a client connection to it, closed when the test ends.
func ServeBufconn(t testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	n := NewBufnet(t)
	conn, err := n.Dial(n.Serve(register))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
