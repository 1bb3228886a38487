package servicekit

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// setupTLS loads the certificate source, reads this service's identity from
// its certificate (it must name this service) and builds the authorizer.
func (s *Server) setupTLS() error {
	src, err := s.opts.TLS.source()
	if err != nil {
		return err
	}
	cert, _, err := src.Current()
	if err != nil {
		return err
	}
	td := s.opts.TLS.trustDomain()
	if err := checkTrustDomain(td); err != nil {
		return fmt.Errorf("servicekit: tls: --trust-domain: %w", err)
	}
	if cert.Leaf == nil {
		return errors.New("servicekit: tls: the certificate did not parse")
	}
	self, err := identityOf(cert.Leaf, td)
	if err != nil {
		return fmt.Errorf("servicekit: tls: this service's certificate: %w", err)
	}
	if self.Service != s.opts.Name {
		return fmt.Errorf("servicekit: tls: the certificate is %s's (%s), not %s's", self.Service, self.URI(td), s.opts.Name)
	}
	s.tls = &tlsConfigs{src: &ownCerts{CertSource: src, self: self, trustDomain: td, log: s.log, cert: cert}, trustDomain: td}
	s.authz = &authorizer{self: self, trustDomain: td, gatewayToken: rand.Text(), log: s.log}
	return nil
}

// ownCerts keeps a service on certificates of its own identity. A rotated
// certificate that names another (secrets mixed up) is not taken up, as
// setupTLS refuses one at start: the last of its own stays in use (with the
// current CA), as FileSource keeps its last material while new files do
// not load. Taken up, it would make the service another identity to every
// peer it dials, and its gateway's loopback calls that identity's instead
// of their HTTP clients' (authorizer.callerOf).
type ownCerts struct {
	CertSource
	self        Identity
	trustDomain string
	log         *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate // the last of its own
	refused *tls.Certificate // the last refused, logged once
}

func (o *ownCerts) Current() (*tls.Certificate, *x509.CertPool, error) {
	cert, pool, err := o.CertSource.Current()
	if err != nil {
		return nil, nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if cert != o.cert {
		var id Identity
		if cert.Leaf != nil { // as setupTLS, a certificate that did not parse is refused
			id, err = identityOf(cert.Leaf, o.trustDomain)
		}
		if cert.Leaf == nil || err != nil || id != o.self {
			if cert != o.refused {
				o.refused = cert
				o.log.Error("tls: a rotated certificate is not this service's; keeping the last one", "want", o.self.String(), "got", id.String())
			}
			return o.cert, pool, nil
		}
		o.cert = cert
	}
	return cert, pool, nil
}

// Identity is this service's own mesh identity; ok is false with TLS off.
func (s *Server) Identity() (Identity, bool) {
	if s.authz == nil {
		return Identity{}, false
	}
	return s.authz.self, true
}

// Dial is servicekit's Dial with this service's transport: its mesh
// certificate when TLS is on. Every client a service makes to a peer goes
// through it.
func (s *Server) Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if s.tls != nil {
		opts = append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.tls.client()))}, opts...)
	}
	return Dial(target, opts...)
}

// checkPublicTLS refuses a public port given half a certificate pair, or a
// pair that does not load: it would serve plaintext (a key alone) or fail
// every handshake (files missing) while its log said it was serving.
// Rotated files are read again at handshakes (httpTLS).
func (o Options) checkPublicTLS() error {
	if !o.PublicHTTP || (o.PublicCertFile == "" && o.PublicKeyFile == "") {
		return nil
	}
	if o.PublicCertFile == "" || o.PublicKeyFile == "" {
		return errors.New("servicekit: --public-tls-cert and --public-tls-key go together: give both, or neither for plaintext")
	}
	if _, err := (&FileSource{CertFile: o.PublicCertFile, KeyFile: o.PublicKeyFile}).keyPair(); err != nil {
		return fmt.Errorf("servicekit: --public-tls-cert/--public-tls-key: %w", err)
	}
	return nil
}

// httpTLS is the HTTP listener's TLS: a mesh port asks for a client
// certificate (the REST gateway's calls need one; /metrics and /healthz do
// not), a public one serves its own certificate when it has one; nil for
// plaintext.
func (s *Server) httpTLS() *tls.Config {
	if s.opts.PublicHTTP {
		if s.opts.PublicCertFile == "" {
			return nil
		}
		pub := &FileSource{CertFile: s.opts.PublicCertFile, KeyFile: s.opts.PublicKeyFile}
		return &tls.Config{
			MinVersion: tls.VersionTLS12, // public clients
			NextProtos: []string{"h2", "http/1.1"},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				c, err := pub.keyPair()
				return c, err
			},
		}
	}
	if s.tls == nil {
		return nil
	}
	return s.tls.server(true, "h2", "http/1.1")
}

// checkExposure refuses to listen beyond loopback without mutual TLS unless
// Insecure says so (and then warns): anyone reaching a plaintext port may
// register a worker or send hints. The health port is plaintext by design
// and serves nothing else; a public HTTP port is the frontend's API.
func (s *Server) checkExposure() error {
	if s.opts.PublicHTTP && s.opts.HTTPAddr != "" && !IsLoopback(s.opts.HTTPAddr) && s.opts.PublicCertFile == "" {
		// Not refused: TLS often ends at a load balancer in front of it.
		s.log.Warn("the public HTTP API listens beyond loopback in plaintext: API keys and prompts cross the network in the clear unless TLS ends in front of it (--public-tls-cert, --public-tls-key)",
			"http_addr", s.opts.HTTPAddr)
	}
	if s.tls != nil {
		return nil
	}
	exposed := []string{}
	if !IsLoopback(s.opts.GRPCAddr) {
		exposed = append(exposed, "gRPC "+s.opts.GRPCAddr)
	}
	if s.opts.HTTPAddr != "" && !s.opts.PublicHTTP && !IsLoopback(s.opts.HTTPAddr) {
		exposed = append(exposed, "HTTP "+s.opts.HTTPAddr)
	}
	if len(exposed) == 0 {
		return nil
	}
	if !s.opts.TLS.Insecure {
		return fmt.Errorf("servicekit: %s: refusing to listen on %s without TLS: give --tls-cert, --tls-key and --tls-ca, a loopback address, or --insecure",
			s.opts.Name, strings.Join(exposed, " and "))
	}
	s.log.Warn("INSECURE: listening without TLS beyond loopback; anyone who reaches these ports can call every RPC",
		"listeners", strings.Join(exposed, ", "))
	return nil
}

// IsLoopback reports whether a listen address binds loopback only
// ("127.0.0.1:8000", "localhost:8000"; not ":8000").
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// gatewayHeaders is grpc-gateway's default header mapping, except that an
// HTTP client cannot send the headers that say for whom the gateway calls,
// and that x-api-key, which the default drops (it forwards Authorization),
// reaches the gRPC side as the metadata of that name: a REST client may
// present its key either way, as the inference APIs take it.
func gatewayHeaders(key string) (string, bool) {
	switch {
	case strings.EqualFold(key, runtime.MetadataHeaderPrefix+restPeerKey),
		strings.EqualFold(key, runtime.MetadataHeaderPrefix+restTokenKey):
		return "", false
	case strings.EqualFold(key, apiKeyHeader):
		return apiKeyHeader, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// apiKeyHeader is the header (and, through the gateway, the metadata) that
// carries an API key beside Authorization: Bearer.
const apiKeyHeader = "x-api-key"

// restPeer tells this server's gRPC side, for each REST call, whose it is:
// the HTTP client's mesh identity (its certificate, verified in the TLS
// handshake); on a public port TenantIdentity; empty for no one.
func (s *Server) restPeer(_ context.Context, r *http.Request) metadata.MD {
	if s.authz == nil {
		return nil
	}
	who := ""
	if id, ok := s.restIdentity(r); ok {
		who = id.String()
	}
	return metadata.Pairs(restPeerKey, who, restTokenKey, s.authz.gatewayToken)
}

// restIdentity is the identity a REST call is made by, under mutual TLS:
// on a public port TenantIdentity, else the HTTP client's certificate's.
func (s *Server) restIdentity(r *http.Request) (Identity, bool) {
	switch {
	case s.opts.PublicHTTP:
		return Identity{Service: TenantIdentity}, true
	case r.TLS != nil && len(r.TLS.PeerCertificates) > 0:
		id, err := identityOf(r.TLS.PeerCertificates[0], s.authz.trustDomain)
		return id, err == nil
	}
	return Identity{}, false
}

// ClientCredentials are mesh client credentials presenting src's
// certificate, for tools that call the mesh as an identity of their own (an
// operator's admin certificate).
func ClientCredentials(src CertSource, trustDomain string) credentials.TransportCredentials {
	if trustDomain == "" {
		trustDomain = DefaultTrustDomain
	}
	return credentials.NewTLS(tlsConfigs{src: src, trustDomain: trustDomain}.client())
}

// Loopback reports whether every port of the server (gRPC and HTTP) is
// configured on loopback only.
func (s *Server) Loopback() bool {
	return IsLoopback(s.opts.GRPCAddr) && (s.opts.HTTPAddr == "" || IsLoopback(s.opts.HTTPAddr))
}
