package servicekit

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MeshServices are the services that get a certificate of their own from
// CertsCommand (engine shims get one per worker).
var MeshServices = []string{"frontend", "scheduler", "flash-indexer", "session-prefix-indexer", "kvhint-emitter", "kv-pool"}

// CertsCommand runs `certs --out DIR`: a development CA and a certificate per
// mesh service, per engine-shim worker and for an operator (admin), as PEM
// files DIR/ca.crt, DIR/<service>.crt and .key, DIR/engine-shim-<worker>.crt
// and .key, DIR/admin.crt and .key. A service's replicas share its certificate
// (the mesh checks identities, not host names); it names them too, as compose
// does (<service>-<n>), for clients that check host names (grpcurl). Every
// service binary has it (compose's one-shot certs service runs it), and so does
// `switchyard certs`. A DIR that already has a ca.crt is left alone unless
// --force: restarting compose keeps its certificates.
func CertsCommand(prog string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(prog+" certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "folder to write the certificates to (created)")
	td := fs.String("trust-domain", DefaultTrustDomain, "SPIFFE trust domain of the identities")
	workers := fs.String("workers", "worker-0,worker-1,worker-2,worker-3", "comma-separated engine-shim worker ids to issue certificates for")
	replicas := fs.Int("replicas", 3, "each service's certificate also names the hosts <service>-0 to <service>-<n-1> (compose's replicas)")
	force := fs.Bool("force", false, "write new certificates even if the folder has some")
	owner := fs.String("chown", "", "uid:gid to own the files (a container writing for services that run as another user)")
	if status, done := parseCommand(fs, args, "out"); done {
		return status
	}
	if *replicas < 0 {
		fmt.Fprintf(stderr, "%s certs: --replicas %d: want 0 or more\n", prog, *replicas)
		return 2
	}
	if err := checkTrustDomain(*td); err != nil {
		fmt.Fprintf(stderr, "%s certs: --trust-domain: %v\n", prog, err)
		return 2
	}
	for _, w := range SplitList(*workers) {
		if err := checkInstance(w); err != nil {
			fmt.Fprintf(stderr, "%s certs: --workers: %v\n", prog, err)
			return 2
		}
	}
	if err := writeDevCerts(*out, *td, SplitList(*workers), *replicas, *force, *owner, stdout); err != nil {
		fmt.Fprintf(stderr, "%s certs: %v\n", prog, err)
		return 1
	}
	return 0
}

func writeDevCerts(dir, td string, workers []string, replicas int, force bool, owner string, stdout io.Writer) error {
	uid, gid := -1, -1
	if owner != "" {
		u, g, ok := strings.Cut(owner, ":")
		var err1, err2 error
		uid, err1 = strconv.Atoi(u)
		gid, err2 = strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("--chown %q: want uid:gid", owner)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.crt")); err == nil && !force {
		fmt.Fprintf(stdout, "certificates already in %s (--force writes new ones)\n", dir)
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca, err := NewDevCA(td)
	if err != nil {
		return err
	}
	write := func(name string, data []byte, mode os.FileMode) error {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path+".tmp", data, mode); err != nil {
			return err
		}
		if uid >= 0 {
			if err := os.Chown(path+".tmp", uid, gid); err != nil {
				return err
			}
		}
		return os.Rename(path+".tmp", path) // whole files only: services re-read them
	}
	issue := func(file string, id Identity, dns ...string) error {
		certPEM, keyPEM, err := ca.Issue(id, dns...)
		if err != nil {
			return err
		}
		if err := write(file+".crt", certPEM, 0o644); err != nil {
			return err
		}
		return write(file+".key", keyPEM, 0o600)
	}
	for _, svc := range MeshServices {
		// Compose names a service's replicas <service>-<n>.
		dns := []string{svc}
		for i := range replicas {
			dns = append(dns, fmt.Sprintf("%s-%d", svc, i))
		}
		if err := issue(svc, Identity{Service: svc}, append(dns, "localhost")...); err != nil {
			return err
		}
	}
	for i, w := range workers {
		// Compose names the shims engine-shim-<i>.
		if err := issue("engine-shim-"+w, Identity{Service: "engine-shim", Instance: w}, fmt.Sprintf("engine-shim-%d", i), "localhost"); err != nil {
			return err
		}
	}
	if err := issue("admin", Identity{Service: AdminIdentity}); err != nil {
		return err
	}
	if err := write("ca.crt", ca.CertPEM, 0o644); err != nil { // last: its presence means done
		return err
	}
	fmt.Fprintf(stdout, "wrote a dev CA (trust domain %s) and certificates for %s, %d engine shims and admin to %s\n",
		td, strings.Join(MeshServices, ", "), len(workers), dir)
	return nil
}
