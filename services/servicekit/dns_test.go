package servicekit

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A peer named by DNS that comes back at a new address (a replaced pod) is
// reached within seconds of the name pointing there, not after gRPC's
// default 30 s between lookups: the first lookup after the old server went
// away still returns its address, as a headless Service's can.
func TestDialFollowsAPeerToItsNewAddress(t *testing.T) {
	var addr atomic.Value // the name's current IPv4 address
	addr.Store(net.IPv4(127, 0, 0, 2))
	dnsAddr := serveDNS(t, func() net.IP { return addr.Load().(net.IP) })

	old, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address here: %v", err)
	}
	port := old.Addr().(*net.TCPAddr).Port
	first := serveHealth(old)
	defer first.Stop() // stopped below; again here if the test ends first
	conn, err := Dial(fmt.Sprintf("dns://%s/peer.switchyard.test:%d", dnsAddr, port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := CheckHealth(ctx, conn); err != nil {
		t.Fatalf("the first server: %v", err)
	}

	// The old server goes; the connection fails and looks the name up at
	// once, still getting the old address; then the name moves.
	first.Stop()
	time.Sleep(200 * time.Millisecond)
	moved, err := net.Listen("tcp", fmt.Sprintf("127.0.0.3:%d", port))
	if err != nil {
		t.Skipf("the port is taken on the third loopback address: %v", err)
	}
	second := serveHealth(moved)
	defer second.Stop()
	addr.Store(net.IPv4(127, 0, 0, 3))
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := CheckHealth(ctx, conn)
		cancel()
		if err == nil {
			t.Logf("reached at the new address %v after the name moved", time.Since(start).Round(10*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peer at its new address was not reached in %v: %v", deadline.Sub(start), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serveHealth serves grpc.health.v1 (SERVING) on l.
func serveHealth(l net.Listener) *grpc.Server {
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(l) //nolint:errcheck // ends with Stop
	return s
}

// serveDNS answers every A question over UDP with ip() (TTL 0) until the
// test ends, and returns its address.
func serveDNS(t *testing.T, ip func() net.IP) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out, err := dnsAnswer(buf[:n], ip()); err == nil {
				pc.WriteTo(out, from) //nolint:errcheck // a lost answer is asked again
			}
		}
	}()
	return pc.LocalAddr().String()
}

// dnsAnswer is the response to query: its A questions answered with ip,
// any other with no records.
func dnsAnswer(query []byte, ip net.IP) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
		if err := b.AResource(rh, dnsmessage.AResource{A: [4]byte(ip.To4())}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
