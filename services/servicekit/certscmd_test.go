package servicekit

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"slices"
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
