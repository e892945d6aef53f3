package egress

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

func TestCA(t *testing.T) {
	ca, err := NewCA("sb-123")
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert.Subject.CommonName != "sandboxd sandbox sb-123" || !ca.cert.IsCA || !ca.cert.MaxPathLenZero {
		t.Fatalf("CA certificate %+v", ca.cert.Subject)
	}
	if d := time.Until(ca.cert.NotAfter); d < 9*365*24*time.Hour {
		t.Fatalf("CA valid for %v", d)
	}
	certPEM, keyPEM := ca.PEM()
	if string(certPEM) != string(ca.CertPEM()) || !strings.Contains(string(keyPEM), "PRIVATE KEY") {
		t.Fatal("PEM")
	}
	if strings.Contains(string(ca.CertPEM()), "PRIVATE") {
		t.Fatal("the sandbox's copy holds the key")
	}
	loaded, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}

	// A leaf from the loaded CA verifies against the original's
	// certificate, for its name only.
	leaf, err := loaded.leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	opts := x509.VerifyOptions{Roots: roots, DNSName: "api.example.com"}
	if _, err := leaf.Leaf.Verify(opts); err != nil {
		t.Fatal(err)
	}
	opts.DNSName = "other.example.com"
	if _, err := leaf.Leaf.Verify(opts); err == nil {
		t.Fatal("leaf valid for another name")
	}
	if again, _ := loaded.leaf("api.example.com"); again != leaf {
		t.Fatal("leaf not cached")
	}

	// Mismatched or broken inputs are refused.
	other, _ := NewCA("sb-456")
	_, otherKey := other.PEM()
	if _, err := LoadCA(certPEM, otherKey); err == nil {
		t.Fatal("loaded a CA with another CA's key")
	}
	if _, err := LoadCA(keyPEM, keyPEM); err == nil {
		t.Fatal("loaded a key as a certificate")
	}
	if _, err := LoadCA(certPEM, []byte("junk")); err == nil {
		t.Fatal("loaded junk as a key")
	}
	block, _ := pem.Decode(certPEM)
	block.Bytes[len(block.Bytes)/2] ^= 0xff
	if _, err := LoadCA(pem.EncodeToMemory(block), keyPEM); err == nil {
		t.Fatal("loaded a corrupted certificate")
	}
}

func TestLeafCacheBounded(t *testing.T) {
	ca, err := NewCA("sb")
	if err != nil {
		t.Fatal(err)
	}
	for i := range leafCacheSize + 10 {
		if _, err := ca.leaf(strings.Repeat("a", i%50+1) + ".example.com" + string(rune('a'+i/50))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(ca.leaves); n > leafCacheSize {
		t.Fatalf("%d leaves cached", n)
	}
}
