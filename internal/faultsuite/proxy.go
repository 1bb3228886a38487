package faultsuite

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Proxy is a TCP proxy in front of one engine shim (the shim advertises the
// proxy's address, so every peer's connection passes it) that can partition
// the shim from chosen processes only: while it is cut, the connections of
// those processes carry nothing either way — as when a network drops their
// packets — and nobody else notices. Healing resumes them where they
// stopped. It tells whose connection it accepted from /proc (the socket's
// inode among the process's file descriptors), so it works on Linux only.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	cutOff func(pid int) bool // which processes a cut applies to
	cut    bool
	healed chan struct{} // closed when a cut ends
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	pid            int // the client's process, 0 if unknown
}

// NewProxy listens on a free loopback port; Serve forwards to upstream.
func NewProxy() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := make(chan struct{})
	close(h)
	return &Proxy{ln: ln, healed: h, conns: map[*proxyConn]struct{}{}}, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Serve accepts until Close, forwarding every connection to upstream.
func (p *Proxy) Serve(upstream string) {
	p.upstream = upstream
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.handle(c)
			}()
		}
	}()
}

// Cut partitions the shim from the processes for which cutOff is true;
// Heal ends it.
func (p *Proxy) Cut(cutOff func(pid int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = cutOff
	if !p.cut {
		p.cut = true
		p.healed = make(chan struct{})
	}
}

func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.healed)
	}
}

// gate blocks while c is cut off.
func (p *Proxy) gate(c *proxyConn) {
	for {
		p.mu.Lock()
		blocked := p.cut && p.cutOff != nil && c.pid != 0 && p.cutOff(c.pid)
		healed := p.healed
		p.mu.Unlock()
		if !blocked {
			return
		}
		<-healed
	}
}

func (p *Proxy) handle(client net.Conn) {
	pid, _ := connOwner(client)
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{client: client, server: server, pid: pid}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.gate(c)
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	client.Close()
	server.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close stops accepting, ends every connection and waits for its goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Heal()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// connOwner finds the process on the other end of an accepted loopback
// connection: the socket whose local address is our remote one, by inode,
// among every process's file descriptors.
func connOwner(c net.Conn) (int, error) {
	remote, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, errors.New("not TCP")
	}
	inode, err := socketInode(remote, local)
	if err != nil {
		return 0, err
	}
	return inodeOwner(inode)
}

// socketInode finds in /proc/net/tcp the socket from local to remote (as its
// owner sees them) and returns its inode.
func socketInode(local, remote *net.TCPAddr) (string, error) {
	want := [2]string{procAddr(local), procAddr(remote)}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 {
				continue
			}
			if strings.EqualFold(fs[1], want[0]) && strings.EqualFold(fs[2], want[1]) ||
				strings.EqualFold(fs[1], v4mapped(want[0])) && strings.EqualFold(fs[2], v4mapped(want[1])) {
				f.Close()
				return fs[9], nil
			}
		}
		f.Close()
	}
	return "", fmt.Errorf("no socket %s -> %s in /proc/net", local, remote)
}

// procAddr writes an IPv4 address as /proc/net/tcp does: the address's four
// bytes as one little-endian word in hex, then the port in hex.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
}

// v4mapped is an IPv4 /proc address as /proc/net/tcp6 shows it mapped.
func v4mapped(a string) string {
	ip, port, ok := strings.Cut(a, ":")
	if !ok {
		return ""
	}
	return "0000000000000000FFFF0000" + ip + ":" + port
}

// inodeOwner finds the process holding socket inode.
func inodeOwner(inode string) (int, error) {
	target := "socket:[" + inode + "]"
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name())); err == nil && l == target {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process holds %s", target)
}
