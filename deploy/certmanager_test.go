package deploy

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cert-manager's types, only the fields the chart uses: decoded strictly, a field the
// chart writes that is not here is an error, so a new one is added here knowingly,
// checked against cert-manager's v1 API (its Go module is too large a dependency for
// two structs).

type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName  string    `json:"secretName"`
		IsCA        bool      `json:"isCA,omitempty"`
		CommonName  string    `json:"commonName,omitempty"`
		DNSNames    []string  `json:"dnsNames,omitempty"`
		URIs        []string  `json:"uris,omitempty"`
		Usages      []string  `json:"usages,omitempty"`
		Duration    string    `json:"duration,omitempty"`
		RenewBefore string    `json:"renewBefore,omitempty"`
		IssuerRef   issuerRef `json:"issuerRef"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
	} `json:"spec"`
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// cert-manager's KeyUsage values.
var keyUsages = []string{
	"signing", "digital signature", "content commitment", "key encipherment", "key agreement",
	"data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
	"server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
	"ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
}

func (c *certificate) validate() error {
	s := c.Spec
	if s.SecretName == "" || s.IssuerRef.Name == "" {
		return fmt.Errorf("Certificate %s: secretName and issuerRef.name are required", c.Name)
	}
	if len(s.DNSNames) == 0 && len(s.URIs) == 0 && s.CommonName == "" {
		return fmt.Errorf("Certificate %s: names nothing", c.Name)
	}
	if k := s.IssuerRef.Kind; k != "" && k != "Issuer" && k != "ClusterIssuer" {
		return fmt.Errorf("Certificate %s: issuerRef.kind %q", c.Name, k)
	}
	for _, u := range s.Usages {
		if !slices.Contains(keyUsages, u) {
			return fmt.Errorf("Certificate %s: usage %q is not one of cert-manager's", c.Name, u)
		}
	}
	for _, d := range []string{s.Duration, s.RenewBefore} {
		if d == "" {
			continue
		}
		if _, err := time.ParseDuration(d); err != nil {
			return fmt.Errorf("Certificate %s: %w", c.Name, err)
		}
	}
	if pk := s.PrivateKey; pk != nil {
		if !slices.Contains([]string{"", "RSA", "ECDSA", "Ed25519"}, pk.Algorithm) || !slices.Contains([]string{"", "Never", "Always"}, pk.RotationPolicy) {
			return fmt.Errorf("Certificate %s: privateKey %+v", c.Name, *pk)
		}
	}
	return nil
}

func (i *issuer) validate() error {
	if (i.Spec.SelfSigned == nil) == (i.Spec.CA == nil) {
		return fmt.Errorf("Issuer %s: exactly one of selfSigned and ca", i.Name)
	}
	if i.Spec.CA != nil && i.Spec.CA.SecretName == "" {
		return fmt.Errorf("Issuer %s: ca.secretName is required", i.Name)
	}
	return nil
}
