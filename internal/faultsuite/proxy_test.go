package faultsuite

import (
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves a loopback echo server until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// needProc skips where there is no Linux /proc (the proxy reads it).
func needProc(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("needs Linux /proc/net/tcp")
	}
}

func TestConnOwnerIsThisProcess(t *testing.T) {
	needProc(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pid, err := connOwner(s)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("connOwner = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
}

// roundTrip writes b and reads it back within d; false if nothing came.
func roundTrip(t *testing.T, c net.Conn, b string, d time.Duration) bool {
	t.Helper()
	if _, err := c.Write([]byte(b)); err != nil {
		t.Fatal(err)
	}
	return readWithin(t, c, b, d)
}

func readWithin(t *testing.T, c net.Conn, want string, d time.Duration) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(want))
	_, err := io.ReadFull(c, buf)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if string(buf) != want {
		t.Fatalf("read %q, want %q", buf, want)
	}
	return true
}

func TestProxyCutsOnlyTheChosenProcess(t *testing.T) {
	needProc(t)
	p, err := NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Serve(echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !roundTrip(t, c, "before", 5*time.Second) {
		t.Fatal("nothing through the proxy")
	}

	p.Cut(func(pid int) bool { return pid == os.Getpid()+1 }) // someone else
	if !roundTrip(t, c, "other", 5*time.Second) {
		t.Fatal("a cut of another process stopped this one")
	}

	p.Cut(func(pid int) bool { return pid == os.Getpid() })
	if roundTrip(t, c, "cut", 200*time.Millisecond) {
		t.Fatal("bytes went through the cut")
	}
	p.Heal()
	if !readWithin(t, c, "cut", 5*time.Second) {
		t.Fatal("held bytes not delivered after the heal")
	}
	if !roundTrip(t, c, "after", 5*time.Second) {
		t.Fatal("nothing through the proxy after the heal")
	}
}
