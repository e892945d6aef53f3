package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// CA is a sandbox's own certificate authority, which it trusts (its
// certificate is installed in the sandbox) and with which the gateway
// terminates TLS for the domains of the sandbox's rules. Its key stays on
// the host.
//
// Each sandbox has its own CA so that a CA's key, were it ever to leak,
// lets its holder impersonate servers to that one sandbox only. The leaves
// it signs are made on demand, for exactly the name a ClientHello carried,
// and cached (leafCacheSize per CA, each valid leafValidity).
type CA struct {
	cert    *x509.Certificate
	certDER []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

const (
	caValidity    = 10 * 365 * 24 * time.Hour
	leafValidity  = 7 * 24 * time.Hour
	leafRenew     = 24 * time.Hour // a cached leaf this close to expiry is made anew
	leafCacheSize = 256
	// clockSkew backdates certificates so that a sandbox whose clock is a
	// little behind the host's still accepts them.
	clockSkew = time.Hour
)

// NewCA makes a CA for sandbox id (ECDSA P-256, valid 10 years, name
// "sandboxd sandbox <id>").
func NewCA(id string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sandboxd sandbox " + id, Organization: []string{"sandboxd"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	return &CA{cert: cert, certDER: der, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// LoadCA reads a CA persisted with PEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("egress: CA certificate: no CERTIFICATE PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("egress: CA certificate: not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("egress: CA key: no PEM block")
	}
	var signer crypto.PrivateKey
	switch kb.Type {
	case "PRIVATE KEY":
		signer, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		signer, err = x509.ParseECPrivateKey(kb.Bytes)
	default:
		return nil, fmt.Errorf("egress: CA key: unexpected PEM block %q", kb.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	key, ok := signer.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("egress: CA key: %T, not ECDSA", signer)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("egress: CA key does not match its certificate")
	}
	return &CA{cert: cert, certDER: cb.Bytes, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// PEM returns the CA's certificate and key, for persisting on the host.
func (ca *CA) PEM() (certPEM, keyPEM []byte) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		// An ECDSA P-256 key always marshals.
		panic("egress: marshal CA key: " + err.Error())
	}
	return ca.CertPEM(), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// CertPEM returns the certificate alone: what the sandbox gets.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.certDER})
}

// leaf returns a certificate for name signed by the CA, from the cache
// when a fresh one is there. name is a validated domain (a rule's SNI).
func (ca *CA) leaf(name string) (*tls.Certificate, error) {
	now := time.Now()
	ca.mu.Lock()
	if c, ok := ca.leaves[name]; ok && now.Add(leafRenew).Before(c.Leaf.NotAfter) {
		ca.mu.Unlock()
		return c, nil
	}
	ca.mu.Unlock()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: name},
		DNSNames:       []string{name},
		NotBefore:      now.Add(-clockSkew),
		NotAfter:       now.Add(leafValidity),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		AuthorityKeyId: ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.certDER}, PrivateKey: key, Leaf: leaf}
	ca.mu.Lock()
	if len(ca.leaves) >= leafCacheSize {
		// Past the bound, forget an arbitrary leaf: a sandbox cycling
		// through names of a wildcard rule costs itself signatures, and
		// nobody else anything.
		for k := range ca.leaves {
			delete(ca.leaves, k)
			break
		}
	}
	ca.leaves[name] = c
	ca.mu.Unlock()
	return c, nil
}

func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("egress: serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func keyID(pub *ecdsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(der)
	return sum[:20]
}
