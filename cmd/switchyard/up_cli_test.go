package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/internal/mesh"
	"switchyard.dev/services/servicekit"
)

// A value up cannot run is a usage error before anything starts, not one
// the mesh replaces by its default without a word (--workers 0 ran four
// workers), and a stray word is refused as every other subcommand refuses it.
func TestUpConfigRefusesWhatItCannotRun(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"--workers", "0"},
		{"--workers", "-1"},
		{"--schedulers", "0"},
		{"--frontends", "-2"},
		{"--flash-indexers", "-1"},
		{"--speedup", "0"},
		{"--speedup", "-2"},
		{"--gpu-blocks", "-5"},
		{"--pool-pages", "-1"},
		{"--ready-timeout", "-1s"},
		// Every service would refuse it, naming flags up does not have.
		{"--host", "0.0.0.0"},
	} {
		var stderr bytes.Buffer
		if _, _, err := upConfig(args, &stderr); !errors.Is(err, errUsage) || stderr.Len() == 0 {
			t.Errorf("upConfig(%q): %v, stderr %q; want a usage error that says why", args, err, stderr.String())
		}
	}
	for _, args := range [][]string{
		nil,
		{"--host", "0.0.0.0", "--secure"},
		{"--host", "localhost"},
		{"--flash-indexers", "0", "--gpu-blocks", "0", "--pool-pages", "0"},
	} {
		if _, _, err := upConfig(args, io.Discard); err != nil {
			t.Errorf("upConfig(%q): %v", args, err)
		}
	}
}

// The table's gRPC column is an address to dial, as its HTTP column and the
// grpcurl lines are: under --host 0.0.0.0 it printed the listener's "[::]:port".
func TestUpTableDialsWildcardListeners(t *testing.T) {
	eps := []mesh.Endpoint{
		{Service: "scheduler", Name: "scheduler", GRPC: "[::]:9100", HTTP: "[::]:9101"},
		{Service: "frontend", Name: "frontend", GRPC: "[::]:8001", HTTP: "127.0.0.1:8000"},
	}
	var out strings.Builder
	printEndpoints(&out, &mesh.Mesh{Endpoints: eps}, "")
	if strings.Contains(out.String(), "[::]") || !strings.Contains(out.String(), "localhost:8001") {
		t.Errorf("the banner prints listen addresses, not ones to dial:\n%s", out.String())
	}
}

// The banner says so when the inference APIs listen beyond loopback
// (--frontend-addr :8000): it said "plaintext on loopback" of a port open on
// every interface.
func TestUpBannerSaysWhereTheAPIsListen(t *testing.T) {
	for _, tc := range []struct {
		http   string
		beyond bool
	}{{"127.0.0.1:8000", false}, {"[::]:8000", true}, {"0.0.0.0:8000", true}} {
		var out strings.Builder
		printEndpoints(&out, &mesh.Mesh{Endpoints: []mesh.Endpoint{{Service: "frontend", Name: "frontend", GRPC: "127.0.0.1:8001", HTTP: tc.http}}}, "")
		first, _, _ := strings.Cut(out.String(), "\n")
		if got := strings.Contains(first, "beyond loopback, in plaintext"); got != tc.beyond || strings.Contains(first, "on loopback)") == tc.beyond {
			t.Errorf("frontend on %s: %q", tc.http, first)
		}
	}
}

// Under an unspecified --host the shims registered the address they listen
// on, "[::]:port": no address to a peer on another machine, and no host the
// mesh's certificates name. Each must register the loopback address the
// table prints, at which a TLS client that checks host names (grpcurl, curl)
// takes the shim's certificate.
func TestUpAdvertisesNoUnspecifiedHost(t *testing.T) {
	cfg, _, err := upConfig([]string{"--host", "0.0.0.0", "--secure", "--workers", "1", "--frontend-addr", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	m, err := mesh.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := m.Wait(); err != nil {
			t.Errorf("mesh stopped with: %v", err)
		}
	})
	conn, err := servicekit.Dial(mesh.DialAddr(m.Endpoint("scheduler").GRPC), m.AdminDialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := schedulerv1.NewSchedulerServiceClient(conn).ListWorkers(ctx, &schedulerv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	shim := mesh.DialAddr(m.Endpoint("engine-shim").GRPC)
	if len(resp.GetWorkers()) != 1 || resp.GetWorkers()[0].GetAddress() != shim {
		t.Fatalf("registered workers %v, want one at %s", resp.GetWorkers(), shim)
	}

	certPEM, keyPEM, err := m.CA.Issue(servicekit.Identity{Service: servicekit.AdminIdentity})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(m.CA.CertPEM)
	host, _, _ := net.SplitHostPort(shim)
	c, err := tls.Dial("tcp", shim, &tls.Config{RootCAs: roots, ServerName: host, Certificates: []tls.Certificate{admin}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("the shim's certificate at its registered address %s: %v", shim, err)
	}
	c.Close()
}

// Ctrl-C before the mesh is ready stops it as Ctrl-C after does: no
// "mesh not ready: context canceled" and no failing exit status.
func TestUpInterruptedWhileStarting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"up", "--frontend-addr", "127.0.0.1:0", "--workers", "1"}, &stdout, &stderr)
	if err != nil || !strings.Contains(stdout.String(), "stopped") {
		t.Errorf("up interrupted while starting: %v, stdout %q", err, stdout.String())
	}
}

// A frontend port in use (another `switchyard up`) says how to pick another.
func TestUpFrontendPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = run(context.Background(), []string{"up", "--frontend-addr", l.Addr().String(), "--workers", "1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--frontend-addr") {
		t.Errorf("up on a port in use: %v; want an error that names --frontend-addr", err)
	}
}

// --help after a command that takes a subcommand or a service is help
// (stdout, success), not "unknown service" or "unknown subcommand".
func TestSubcommandHelp(t *testing.T) {
	for _, args := range [][]string{{"serve", "--help"}, {"serve", "-h"}, {"perf", "--help"}, {"trace", "--help"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "Usage: switchyard "+args[0]) {
			t.Errorf("switchyard %s: %v, stdout %q, stderr %q", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
	}
}

// `switchyard serve <service>` has the service binary's subcommands:
// healthcheck, and certs.
func TestServeHasTheServicesSubcommands(t *testing.T) {
	dir := t.TempDir()
	if err := run(context.Background(), []string{"serve", "scheduler", "certs", "--out", dir}, io.Discard, io.Discard); err != nil {
		t.Fatalf("serve scheduler certs: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "scheduler.crt")); err != nil {
		t.Errorf("serve scheduler certs wrote no scheduler certificate: %v", err)
	}
}
