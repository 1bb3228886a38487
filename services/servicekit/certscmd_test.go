package servicekit

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCertsCommandNamesReplicas: a service's one certificate, which all its
// replicas present, names each replica's compose host name, so a client that
// checks host names (grpcurl) can dial any of them; the identity stays the
// service's.
func TestCertsCommandNamesReplicas(t *testing.T) {
	dir := t.TempDir()
	if code := CertsCommand("switchyard", []string{"--out", dir, "--replicas", "3"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(filepath.Join(dir, "scheduler.crt"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"scheduler", "scheduler-0", "scheduler-1", "scheduler-2", "localhost"}
	if !slices.Equal(cert.DNSNames, want) {
		t.Errorf("DNS names %v, want %v", cert.DNSNames, want)
	}
	if id, err := identityOf(cert, DefaultTrustDomain); err != nil || id != (Identity{Service: "scheduler"}) {
		t.Errorf("identity %v, %v; want the service's, scheduler", id, err)
	}
}

// TestCommandsTakeFlagsOnly: a stray word on certs, healthcheck or a
// service's command line is a usage error (exit 2), not the end of the flags
// with the rest dropped; so is a negative --replicas.
func TestCommandsTakeFlagsOnly(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"--out", dir, "extra", "--force"}, {"--out", dir, "--replicas", "-1"}} {
		if code := CertsCommand("switchyard", args, io.Discard, io.Discard); code != 2 {
			t.Errorf("certs %v: exit %d, want 2", args, code)
		}
	}
	if code := HealthcheckCommand("scheduler", []string{"--addr", "127.0.0.1:1", "extra"}, io.Discard); code != 2 {
		t.Errorf("healthcheck with a stray word: exit %d, want 2", code)
	}
	err := Serve(t.Context(), "scheduler", []string{"extra", "--grpc-addr", "127.0.0.1:0"}, func(*flag.FlagSet) {},
		func(*Server) (Service, error) { t.Fatal("built a service from a stray word"); return nil, nil })
	var ue usageError
	if !errors.As(err, &ue) {
		t.Errorf("serve with a stray word: %v, want a usage error", err)
	}
}

// A trust domain or a worker id that no SPIFFE ID can hold, or no file
// name, is refused before anything is written: the certificates would load
// nowhere ("invalid URL escape"), or half of them would be written.
func TestCertsRefusesNamesNoIdentityHolds(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--trust-domain", "bad domain/x", "--trust-domain: trust domain"},
		{"--trust-domain", "Upper.Case", "--trust-domain: trust domain"},
		{"--workers", "a b,c", `--workers: worker id "a b"`},
		{"--workers", "w0,c/d", `--workers: worker id "c/d"`},
	} {
		dir := filepath.Join(t.TempDir(), "certs")
		var stderr strings.Builder
		if code := CertsCommand("switchyard", []string{"--out", dir, tc.flag, tc.value}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("certs %s %q: exit %d, %q; want 2 and %q", tc.flag, tc.value, code, stderr.String(), tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("certs %s %q wrote %s (%v)", tc.flag, tc.value, dir, err)
		}
	}
	// What they may hold: a certificate for every worker that loads.
	dir := t.TempDir()
	if code := CertsCommand("switchyard", []string{"--out", dir, "--trust-domain", "mesh-1.example_org", "--workers", "Worker_0.a-b"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("certs with a valid trust domain and worker id: exit %d", code)
	}
	if _, _, err := (&FileSource{CertFile: filepath.Join(dir, "engine-shim-Worker_0.a-b.crt"), KeyFile: filepath.Join(dir, "engine-shim-Worker_0.a-b.key"), CAFile: filepath.Join(dir, "ca.crt")}).Current(); err != nil {
		t.Fatal(err)
	}
}

// TestIssueNamesAnIPAsAnIP: a host given as an IP address goes into the
// certificate's IP SANs, the only ones a client dialling that address
// checks; it went into the DNS names, where no client looks for it.
func TestIssueNamesAnIPAsAnIP(t *testing.T) {
	ca, err := NewDevCA("")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(Identity{Service: "scheduler"}, "scheduler-0", "10.0.0.7", "fd00::7")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cert.DNSNames, []string{"scheduler-0"}) {
		t.Errorf("DNS names %q, want only scheduler-0", cert.DNSNames)
	}
	for _, host := range []string{"scheduler-0", "10.0.0.7", "fd00::7"} {
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}
