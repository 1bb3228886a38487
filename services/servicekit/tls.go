package servicekit

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Mutual TLS for the mesh. Every service has an identity, a URI SAN
//
//	spiffe://<trust-domain>/switchyard/<service>[/<instance>]
//
// (an engine shim's instance is its worker id), in a certificate signed by the
// mesh's CA. With TLS on, every gRPC listener requires a client certificate from
// that CA, every mesh client presents its own, and authz.go decides from the
// caller's identity which RPCs it may make. Certificates and the CA are re-read
// when their files change, so cert-manager or a SPIFFE agent can rotate them
// without a restart: new connections use the new files, open ones keep theirs.

// DefaultTrustDomain is the trust domain of identities when none is configured.
const DefaultTrustDomain = "switchyard.local"

// AdminIdentity is the service name of operators' certificates
// (spiffe://<td>/switchyard/admin): grpcurl and the admin tools use one.
const AdminIdentity = "admin"

// TLSOptions configure a service's mutual TLS. Either the three files or Source.
type TLSOptions struct {
	// CertFile and KeyFile are this service's certificate (chain) and key,
	// CAFile the CA bundle peers' certificates must chain to (PEM).
	CertFile, KeyFile, CAFile string
	// TrustDomain is the SPIFFE trust domain of every identity
	// (DefaultTrustDomain when empty).
	TrustDomain string
	// Insecure lets the service listen on a non-loopback address without
	// TLS (it says so in a warning at start).
	Insecure bool
	// Source, when set, supplies the certificate and CA instead of files
	// (switchyard up --secure keeps them in memory).
	Source CertSource
}

// CertSource yields the current certificate and CA pool.
type CertSource interface {
	Current() (*tls.Certificate, *x509.CertPool, error)
}

// Enabled reports whether mutual TLS is configured.
func (o TLSOptions) Enabled() bool {
	return o.Source != nil || o.CertFile != "" || o.KeyFile != "" || o.CAFile != ""
}

func (o *TLSOptions) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.CertFile, "tls-cert", o.CertFile, "this service's mesh certificate (PEM; its URI SAN is its identity); with --tls-key and --tls-ca turns on mutual TLS")
	fs.StringVar(&o.KeyFile, "tls-key", o.KeyFile, "the key of --tls-cert (PEM)")
	fs.StringVar(&o.CAFile, "tls-ca", o.CAFile, "the CA bundle every mesh peer's certificate must chain to (PEM)")
	fs.StringVar(&o.TrustDomain, "trust-domain", cmp.Or(o.TrustDomain, DefaultTrustDomain), "SPIFFE trust domain of the mesh's identities (spiffe://<domain>/switchyard/<service>)")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "allow listening on a non-loopback address without TLS (anyone who reaches the ports can call every RPC)")
}

// trustDomain is the configured trust domain or the default.
func (o TLSOptions) trustDomain() string {
	if o.TrustDomain != "" {
		return o.TrustDomain
	}
	return DefaultTrustDomain
}

// source returns the certificate source: Source, or the files watched for
// changes. It checks that the files load.
func (o TLSOptions) source() (CertSource, error) {
	if o.Source != nil {
		return o.Source, nil
	}
	if o.CertFile == "" || o.KeyFile == "" || o.CAFile == "" {
		return nil, errors.New("servicekit: mutual TLS needs --tls-cert, --tls-key and --tls-ca together")
	}
	fs := &FileSource{CertFile: o.CertFile, KeyFile: o.KeyFile, CAFile: o.CAFile}
	if _, _, err := fs.Current(); err != nil {
		return nil, err
	}
	return fs, nil
}

// checkTrustDomain refuses a trust domain no SPIFFE ID can hold: its name
// is lowercase letters, digits, '.', '-' and '_' (the SPIFFE ID standard).
func checkTrustDomain(td string) error {
	if td == "" || strings.IndexFunc(td, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_')
	}) >= 0 {
		return fmt.Errorf("trust domain %q: want lowercase letters, digits, '.', '-' and '_'", td)
	}
	return nil
}

// checkInstance refuses an identity instance (a worker id) that is not one
// segment of a SPIFFE ID's path, made of the characters such a segment may
// hold unescaped (the SPIFFE ID standard), which are also a file name's.
func checkInstance(inst string) error {
	if inst == "" || inst == "." || inst == ".." || strings.IndexFunc(inst, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_')
	}) >= 0 {
		return fmt.Errorf("worker id %q: want letters, digits, '.', '-' and '_'", inst)
	}
	return nil
}

// Identity is who a certificate says its holder is.
type Identity struct {
	Service  string // "scheduler", "engine-shim", "admin", ...
	Instance string // an engine shim's worker id; "" for the others
}

func (id Identity) String() string {
	if id.Instance == "" {
		return id.Service
	}
	return id.Service + "/" + id.Instance
}

// URI is the identity's SPIFFE ID in trustDomain.
func (id Identity) URI(trustDomain string) *url.URL {
	p := "/switchyard/" + id.Service
	if id.Instance != "" {
		p += "/" + id.Instance
	}
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: p}
}

// errNoIdentity: a certificate carries no Switchyard identity of the domain.
var errNoIdentity = errors.New("no spiffe://<trust-domain>/switchyard/<service> URI SAN")

// identityOf reads the Switchyard identity from a certificate's URI SANs.
func identityOf(cert *x509.Certificate, trustDomain string) (Identity, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != trustDomain {
			continue
		}
		rest, ok := strings.CutPrefix(u.Path, "/switchyard/")
		if !ok || rest == "" {
			continue
		}
		svc, inst, _ := strings.Cut(rest, "/")
		if svc == "" || strings.Contains(inst, "/") {
			continue
		}
		// Only the identity's own ID, whole: u.Path is unescaped, so
		// ".../admin%2Fx" would read as admin, and so would ".../admin/",
		// ".../admin?q" or a user@ before the domain, each another ID.
		id := Identity{Service: svc, Instance: inst}
		if u.String() != id.URI(trustDomain).String() {
			continue
		}
		return id, nil
	}
	return Identity{}, fmt.Errorf("%w (trust domain %s)", errNoIdentity, trustDomain)
}

// verifyPeer checks a peer's chain against pool for usage, and that its leaf
// names an identity of trustDomain.
func verifyPeer(certs []*x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage, trustDomain string) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, errors.New("peer sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return Identity{}, err
	}
	return identityOf(certs[0], trustDomain)
}

// tlsConfigs builds the server and client TLS configurations of a source.
// Each handshake asks the source for the current material, so rotated files
// take effect on the next connection.
type tlsConfigs struct {
	src         CertSource
	trustDomain string
}

// server requires (or, with optional, accepts) a client certificate of the
// mesh and serves the current certificate.
func (c tlsConfigs) server(optional bool, nextProtos ...string) *tls.Config {
	auth := tls.RequireAnyClientCert
	if optional {
		auth = tls.RequestClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool, err := c.src.Current()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   auth,
				// The chain is checked against the CA of this handshake (the
				// pool may have rotated), and the leaf must be one of ours.
				// VerifyConnection, not VerifyPeerCertificate: only it runs
				// on a resumed session too, whose certificate comes from a
				// ticket issued under an earlier CA.
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 && optional {
						return nil
					}
					_, err := verifyPeer(cs.PeerCertificates, pool, x509.ExtKeyUsageClientAuth, c.trustDomain)
					return err
				},
			}, nil
		},
	}
}

// client presents the current certificate and checks the server's chain
// against the current CA and its identity against the trust domain. (Go's
// own verification is replaced, not skipped: it cannot take a CA pool that
// changes, nor check a URI SAN.)
func (c tlsConfigs) client() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _, err := c.src.Current()
			return cert, err
		},
		InsecureSkipVerify: true, // verified in VerifyConnection, below
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool, err := c.src.Current()
			if err != nil {
				return err
			}
			_, err = verifyPeer(cs.PeerCertificates, pool, x509.ExtKeyUsageServerAuth, c.trustDomain)
			return err
		},
	}
}

// reloadCheck is how often FileSource looks at its files' modification times.
var reloadCheck = time.Second

// FileSource reads a certificate, its key and a CA bundle from PEM files, and
// reads them again when any of them changes (size or modification time,
// looked at most every second). A change that does not load (a half-written
// file) keeps the previous material until the files load again.
type FileSource struct {
	CertFile, KeyFile, CAFile string

	mu      sync.Mutex
	checked time.Time
	stamp   [3]fileStamp
	cert    *tls.Certificate
	pool    *x509.CertPool
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// Current returns the material of the files as last loaded.
func (f *FileSource) Current() (*tls.Certificate, *x509.CertPool, error) {
	return f.load(true)
}

// keyPair returns the certificate alone (a public listener's: no CA).
func (f *FileSource) keyPair() (*tls.Certificate, error) {
	cert, _, err := f.load(false)
	return cert, err
}

// load returns the certificate and, withCA, the CA pool, reading the files
// again when they changed (refresh).
func (f *FileSource) load(withCA bool) (*tls.Certificate, *x509.CertPool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	paths := []string{f.CertFile, f.KeyFile}
	if withCA {
		paths = append(paths, f.CAFile)
	}
	err := f.refresh(func() error {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return fmt.Errorf("servicekit: tls: %s, %s: %w", f.CertFile, f.KeyFile, err)
		}
		if !withCA {
			f.cert = &cert
			return nil
		}
		caPEM, err := os.ReadFile(f.CAFile)
		if err != nil {
			return fmt.Errorf("servicekit: tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return fmt.Errorf("servicekit: tls: %s: no PEM certificate", f.CAFile)
		}
		f.cert, f.pool = &cert, pool
		return nil
	}, paths...)
	return f.cert, f.pool, err
}

// refresh runs load when the files changed since the last load (looked at
// most every reloadCheck). Once something loaded, a failure keeps it and
// reports nothing; before, it is the error.
func (f *FileSource) refresh(load func() error, paths ...string) error {
	now := time.Now()
	if f.cert != nil && now.Sub(f.checked) < reloadCheck {
		return nil
	}
	f.checked = now
	var stamp [3]fileStamp
	for i, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return f.keep(fmt.Errorf("servicekit: tls: %w", err))
		}
		stamp[i] = fileStamp{size: st.Size(), mod: st.ModTime()}
	}
	if f.cert != nil && stamp == f.stamp {
		return nil
	}
	if err := load(); err != nil {
		return f.keep(err)
	}
	f.stamp = stamp
	return nil
}

// keep forgives err when earlier material is there to go on with.
func (f *FileSource) keep(err error) error {
	if f.cert != nil {
		return nil
	}
	return err
}
