package servicekit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"time"
)

// DevCA is a throwaway certificate authority for development meshes:
// `switchyard up --secure` keeps one in memory, `switchyard certs` writes one
// to files for compose. Production meshes take their certificates from
// cert-manager, a SPIFFE agent or their own CA.
type DevCA struct {
	TrustDomain string
	cert        *x509.Certificate
	key         *ecdsa.PrivateKey
	// CertPEM is the CA certificate, the bundle every peer trusts.
	CertPEM []byte
}

// devValidity is how long dev certificates live.
const devValidity = 90 * 24 * time.Hour

// NewDevCA makes a CA for trustDomain (DefaultTrustDomain when empty).
func NewDevCA(trustDomain string) (*DevCA, error) {
	if trustDomain == "" {
		trustDomain = DefaultTrustDomain
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Switchyard dev CA (" + trustDomain + ")"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(devValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &DevCA{TrustDomain: trustDomain, cert: cert, key: key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue makes a certificate and key (PEM) for id, usable as both server and
// client, its SPIFFE ID the only URI SAN; hosts are added for clients that
// check host names (grpcurl, curl): a name as a DNS name, an IP address as
// an IP address (a client dialling an IP checks only those), and with
// "localhost" the loopback addresses.
func (ca *DevCA) Issue(id Identity, hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.String()},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(devValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.URI(ca.TrustDomain)},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if slices.Contains(hosts, "localhost") {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("servicekit: issue %s: %w", id, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// Source issues id a certificate and returns it with this CA as a
// CertSource held in memory.
func (ca *DevCA) Source(id Identity, hosts ...string) (CertSource, error) {
	certPEM, keyPEM, err := ca.Issue(id, hosts...)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return staticSource{cert: &cert, pool: pool}, nil
}

type staticSource struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

func (s staticSource) Current() (*tls.Certificate, *x509.CertPool, error) { return s.cert, s.pool, nil }

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
