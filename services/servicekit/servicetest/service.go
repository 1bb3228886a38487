package servicetest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"switchyard.dev/services/servicekit"
)

// Discard is the logger of services under test: they log nothing.
var Discard = slog.New(slog.DiscardHandler)

// VerifyNoLeaks is goleak.VerifyTestMain for a package whose tests run gRPC
// servers and clients: it ignores the goroutines of pooled connections that
// grpc-go and net/http wind down on their own after the test, and whatever
// else opts ignore.
func VerifyNoLeaks(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append([]goleak.Option{
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	}, opts...)...)
}

// Running is a service started by Start.
type Running struct {
	// Server is the service's shell: GRPCAddr, HTTPAddr ("" without HTTP).
	Server *servicekit.Server
	// Conn is a client connection to Server's gRPC port.
	Conn *grpc.ClientConn

	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	once    sync.Once
	stopped bool // Stop was called by the test
}

// Start runs a service the way its main does (servicekit.Run of the server and
// the service's loops) on loopback until the test ends, and returns it with the
// service that build made on the server. opts.GRPCAddr "" is a free loopback
// port (opts.HTTPAddr "" is no HTTP, as in servicekit); a nil opts.Logger is
// Discard; opts.ShutdownNotice is kept as given (zero, unless the options come
// from servicekit.DefaultOptions, whose notice would add a second to every
// stop). At the end of the test the connection is closed and the service
// stopped, and an error it stopped with fails the test.
func Start[S servicekit.Service](t testing.TB, opts servicekit.Options, build func(*servicekit.Server) (S, error)) (*Running, S) {
	t.Helper()
	var zero S
	if opts.GRPCAddr == "" {
		opts.GRPCAddr = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = Discard
	}
	srv, err := servicekit.New(opts)
	if err != nil {
		t.Fatal(err)
		return nil, zero
	}
	svc, err := build(srv)
	if err != nil {
		srv.Close()
		t.Fatal(err)
		return nil, zero
	}
	if err := srv.Listen(); err != nil {
		srv.Close()
		t.Fatal(err)
		return nil, zero
	}
	conn, err := servicekit.Dial(srv.GRPCAddr())
	if err != nil {
		srv.Close()
		t.Fatal(err)
		return nil, zero
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{Server: srv, Conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = servicekit.Run(ctx, srv, svc.Run)
	}()
	t.Cleanup(func() {
		conn.Close()
		if err := r.stop(); err != nil && !r.stopped {
			t.Errorf("%s stopped with: %v", opts.Name, err)
		}
	})
	return r, svc
}

// Cancel begins the service's shutdown, as SIGTERM does, and returns at once.
func (r *Running) Cancel() { r.once.Do(r.cancel) }

// Stop shuts the service down (Cancel), waits until it has stopped and returns
// what it stopped with; the test then checks that error itself. It may be
// called more than once.
func (r *Running) Stop() error {
	r.stopped = true
	return r.stop()
}

func (r *Running) stop() error {
	r.Cancel()
	<-r.done
	return r.err
}

// Done is closed once the service has stopped.
func (r *Running) Done() <-chan struct{} { return r.done }

// Get fetches url (a service's REST gateway, /metrics) and returns the body,
// failing the test unless the answer is 200 OK.
func Get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s (%v)", url, resp.StatusCode, b, err)
	}
	return string(b)
}

// PostJSON posts body as JSON to url (a service's REST gateway) and decodes
// the answer into out, failing the test unless the answer is 200 OK JSON;
// it returns the raw answer for messages.
func PostJSON(t testing.TB, url, body string, out any) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(b, out)
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s (%v)", url, resp.StatusCode, b, err)
	}
	return string(b)
}
